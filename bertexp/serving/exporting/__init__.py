"""Export files: SavedModels in TF Serving's layout, TFLite, ONNX, and the Predictor that reads them."""
