"""`bertexp.Predictor`: an exported model (`--mode=export`) as a Python object.

    predictor = bertexp.Predictor("runs/mrpc/export")       # newest version
    predictor.predict(["a fine film", "dull"])              # one text per row
    predictor.predict(["江泽民在北京"])                       # a tagger: entities
    predictor.predict([("sentence a", "sentence b")])       # pairs
    predictor.answer("Who wrote it?", "It was written by Ann.")

It calls the SavedModel's `serve_text` signature (tokenizer and packing in
the graph, as `bertexp prepare` does), in batches of `batch_size`.
"""
import tensorflow as tf

from bertexp.serving.versions import resolve_export_dir
from bertexp.util import fileio


def _text(value, what):
  if not isinstance(value, str):
    raise ValueError(f"{what}: expected a string, got {type(value).__name__}")
  return value


def _tagged(out, i):
  """Row i of a tagging export's outputs -> {"entities", "words"}."""
  entities = [{"text": out["entity_texts"][i][k].decode(),
               "type": out["entity_types"][i][k].decode(),
               "start": int(out["entity_starts"][i][k]),
               "end": int(out["entity_ends"][i][k]),
               "score": float(out["entity_scores"][i][k])}
              for k in range(int(out["num_entities"][i]))]
  words = [{"text": word.decode(), "tag": tag.decode(), "start": int(start),
            "end": int(end), "score": float(score)}
           for word, tag, start, end, score in zip(
               out["words"][i], out["tags"][i], out["word_starts"][i],
               out["word_ends"][i], out["scores"][i]) if start >= 0]
  return {"entities": entities, "words": words}


class Predictor:
  """Classification, regression, tagging or question answering from an export.

  `predict(rows)` -> one dict per row: {"label", "probabilities"} for a
  classifier (probabilities in label-id order), {"value"} for regression,
  {"entities": [{"text", "type", "start", "end", "score"}], "words": [{"text",
  "tag", "start", "end", "score"}]} for a tagger (character offsets into the
  row's text).
  `answer(question, context)` -> {"answer", "score", "context_truncated"}
  (SQuAD v2.0 models also "null_score_diff"); lists of questions and
  contexts give a list.
  """

  def __init__(self, export_dir, batch_size=64):
    import tensorflow_text  # noqa: F401  (registers serve_text's tokenizer ops)
    self.export_dir = resolve_export_dir(export_dir)
    self.batch_size = batch_size
    if not tf.io.gfile.exists(fileio.join(self.export_dir, "saved_model.pb")):
      raise ValueError(f"{self.export_dir}: an ONNX model; the Predictor "
                       "reads SavedModel exports (--mode=export), which "
                       "carry the tokenizer; serve ONNX models on token ids "
                       "with bertexp serve")
    self._loaded = tf.saved_model.load(self.export_dir)
    if "serve_text" not in self._loaded.signatures:
      raise ValueError(f"{self.export_dir}: exported without a serve_text "
                       "signature (no vocabulary was configured)")
    self._serve = self._loaded.signatures["serve_text"]
    self.inputs = sorted(self._serve.structured_input_signature[1])

  def _run(self, columns):
    """{input name: [str]} -> {output name: numpy array}, batch by batch."""
    size = len(next(iter(columns.values())))
    pieces = {}
    for start in range(0, size, self.batch_size):
      batch = {k: tf.constant(v[start:start + self.batch_size], tf.string)
               for k, v in columns.items()}
      for name, value in self._serve(**batch).items():
        pieces.setdefault(name, []).append(value.numpy())
    return {name: [x for part in parts for x in part]
            for name, parts in pieces.items()}

  def predict(self, rows):
    """Texts (one-text models) or (text_a, text_b) pairs -> dicts."""
    if self.inputs == ["context", "question"]:
      raise ValueError("a question-answering model: use answer(question, "
                       "context)")
    rows = list(rows)
    if self.inputs == ["text"]:
      columns = {"text": [_text(r, f"row {i}") for i, r in enumerate(rows)]}
    else:
      for i, row in enumerate(rows):
        if not isinstance(row, (tuple, list)) or len(row) != 2:
          raise ValueError(f"row {i}: this model reads pairs (text_a, "
                           f"text_b), got {row!r}")
      columns = {"text_a": [_text(a, f"row {i}") for i, (a, _) in enumerate(rows)],
                 "text_b": [_text(b, f"row {i}") for i, (_, b) in enumerate(rows)]}
    if not rows:
      return []
    out = self._run(columns)
    if "entity_types" in out:
      return [_tagged(out, i) for i in range(len(rows))]
    if "value" in out:
      return [{"value": float(v)} for v in out["value"]]
    return [{"label": label.decode(), "probabilities": [float(p) for p in probs]}
            for label, probs in zip(out["label"], out["probabilities"])]

  def answer(self, question, context):
    """The answer span of `context` for `question` (or lists of both)."""
    if self.inputs != ["context", "question"]:
      raise ValueError("not a question-answering model: use predict(rows)")
    single = isinstance(question, str)
    questions = [question] if single else list(question)
    contexts = [context] if single else list(context)
    if len(questions) != len(contexts):
      raise ValueError(f"{len(questions)} questions but {len(contexts)} "
                       "contexts")
    if not questions:
      return []
    out = self._run({
        "question": [_text(q, f"question {i}") for i, q in enumerate(questions)],
        "context": [_text(c, f"context {i}") for i, c in enumerate(contexts)]})
    results = []
    for i in range(len(questions)):
      result = {"answer": out["answer"][i].decode(),
                "score": float(out["score"][i]),
                "context_truncated": bool(out["context_truncated"][i])}
      if "null_score_diff" in out:
        result["null_score_diff"] = float(out["null_score_diff"][i])
      results.append(result)
    return results[0] if single else results
