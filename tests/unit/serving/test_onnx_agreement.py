"""onnx_export.agreement: the figures export-onnx reports compare span
logits on real tokens only; padding's logits sit at -10000, where one
float32 step (2^-10) would otherwise be the reported difference."""
import numpy as np

from bertexp.serving.exporting import onnx_export


def test_span_logits_are_compared_on_real_tokens_only():
  mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], np.int32)
  keras = np.where(mask > 0, 1.5, -10000.0).astype(np.float32)
  onnx = keras.copy()
  onnx[0, 1] -= 3e-6                              # a real token: float noise
  onnx[1, 4] = np.nextafter(np.float32(-10000.0), np.float32(0))   # padding
  expected, got = {"start_logits": keras}, {"start_logits": onnx}
  unmasked = onnx_export.agreement(expected, got)
  masked = onnx_export.agreement(expected, got, mask=mask)
  assert unmasked["max_abs_diff_start_logits"] == 2.0 ** -10
  assert 2e-6 < masked["max_abs_diff_start_logits"] < 4e-6
  assert masked["argmax_agreement_start_logits"] == 1.0


def test_per_example_outputs_ignore_the_mask():
  mask = np.ones([2, 5], np.int32)
  expected = {"probabilities": np.array([[0.2, 0.8], [0.6, 0.4]], np.float32)}
  got = {"probabilities": expected["probabilities"] + np.float32(1e-3)}
  report = onnx_export.agreement(expected, got, mask=mask)
  assert abs(report["max_abs_diff_probabilities"] - 1e-3) < 1e-6
