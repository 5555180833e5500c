"""Names of the records a run writes into MODEL_DIR, for readers that do not
load TensorFlow (a sweep worker reading its trials' folders)."""

# best_checkpoint/'s record of the checkpoint it holds (bertexp.checkpoints.run_dir).
BEST_INFO = "best_checkpoint.json"
# Early stopping's record in MODEL_DIR (bertexp.train.loop.EarlyStopping).
EARLY_STOPPING_INFO = "early_stopping.json"
