"""Every use of another library's private API, each behind one helper that
says why no public call does the job. If an upgrade moves one of them, this
is the one file to change (tests/unit/package/test_import_rules.py keeps the rest of the
package off these names)."""


def gin_macro_names():
  """The names of the macros the parsed .gin files define.

  gin has no public listing of macros; bertexp needs one to suggest the
  closest name for a misspelt --gin_param (LEARNIG_RATE -> LEARNING_RATE).
  """
  import gin  # pylint: disable=g-import-not-at-top
  return [key[0] for key in gin.config._CONFIG  # pylint: disable=protected-access
          if key[1] == "gin.macro"]


def onednn_enabled():
  """Whether TensorFlow runs its oneDNN CPU kernels in this process; None
  when this TensorFlow cannot say.

  TensorFlow decides once, when it loads, and has no public call that tells:
  this asks the flag its own tests read.
  """
  try:
    from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return bool(_pywrap_util_port.IsMklEnabled())


def strategy_supports_no_merge_call():
  """Whether the current strategy applies gradients without a merge_call.

  Keras' own LossScaleOptimizer asks the same internal question to decide
  where a conditional update may run; there is no public equivalent.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.__internal__.distribute.strategy_supports_no_merge_call()


def basic_tokenizer(lower_case):
  """tensorflow_text's BasicTokenizer (whitespace, punctuation and CJK
  splitting, as BertTokenizer's first stage).

  build-vocab must find words exactly as BertTokenizer does before
  WordPiece; tensorflow_text exports that stage only inside BertTokenizer.
  """
  from tensorflow_text.python.ops import bert_tokenizer  # pylint: disable=g-import-not-at-top
  return bert_tokenizer.BasicTokenizer(lower_case=lower_case)
