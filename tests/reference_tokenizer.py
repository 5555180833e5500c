"""An independent, pure-Python statement of google-research/bert's tokenizer
rules (FullTokenizer = BasicTokenizer + WordpieceTokenizer), for parity tests.
Slow and simple on purpose."""
import unicodedata


def _is_whitespace(ch):
  return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch):
  if ch in "\t\n\r":
    return False
  return unicodedata.category(ch).startswith("C")


def _is_punctuation(ch):
  cp = ord(ch)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _is_cjk(cp):
  ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
            (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
            (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]
  return any(lo <= cp <= hi for lo, hi in ranges)


def basic_tokenize(text, do_lower_case):
  cleaned = []
  for ch in text:
    cp = ord(ch)
    if cp == 0 or cp == 0xFFFD or _is_control(ch):
      continue
    cleaned.append(" " if _is_whitespace(ch) else ch)
  spaced = []
  for ch in cleaned:
    spaced.append(f" {ch} " if _is_cjk(ord(ch)) else ch)
  tokens = []
  for word in "".join(spaced).split():
    if do_lower_case:
      word = unicodedata.normalize("NFD", word.lower())
      word = "".join(c for c in word if unicodedata.category(c) != "Mn")
    current = ""
    for ch in word:
      if _is_punctuation(ch):
        if current:
          tokens.append(current)
        tokens.append(ch)
        current = ""
      else:
        current += ch
    if current:
      tokens.append(current)
  return tokens


def wordpiece(word, vocab, max_chars=200):
  if len(word) > max_chars:
    return ["[UNK]"]
  pieces, start = [], 0
  while start < len(word):
    end = len(word)
    found = None
    while start < end:
      piece = word[start:end] if start == 0 else "##" + word[start:end]
      if piece in vocab:
        found = piece
        break
      end -= 1
    if found is None:
      return ["[UNK]"]
    pieces.append(found)
    start = end
  return pieces


def full_tokenize(text, vocab, do_lower_case=True):
  return [p for w in basic_tokenize(text, do_lower_case)
          for p in wordpiece(w, vocab)]
