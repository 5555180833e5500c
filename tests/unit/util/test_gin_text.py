"""Reading string macros from a run's written gin files
(bertexp/util/gin_text.py), as gin writes them."""
import gin

from bertexp.util import gin_text


def test_string_macros_as_gin_writes_them_long_values_included():
  long_path = "/tmp/" + "a_rather_long_folder_name_" * 4 + "bert_config.json"
  gin.parse_config(f"BERT_CONFIG_FILE = '{long_path}'\nSHORT = \"x\"\n"
                   "NUMBER = 3")
  text = gin.config_str()
  assert "BERT_CONFIG_FILE = \\\n" in text       # gin wrapped it
  assert gin_text.string_macros(text) == {"BERT_CONFIG_FILE": long_path,
                                          "SHORT": "x"}


def test_the_last_binding_of_a_macro_wins():
  assert gin_text.string_macros("A = 'one'\nA = 'two'\n") == {"A": "two"}
