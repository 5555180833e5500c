"""The demo data's command line (`python tools/demo_data.py fetch`, ...);
the code is bertexp/util/demo_data.py, which the tests import. The reports
that read the demos' run folders are here (`zh-report`)."""
import json
import os
import statistics

from bertexp.checkpoints import run_files
from bertexp.util.demo_data import main


def zh_report(runs="runs", seeds=(1, 2, 3)):
  """MLM accuracy before/after pretraining; sentiment fine-tuned from the
  pretrained encoder vs from random initialisation, mean ± std over seeds."""
  def load(name):
    with open(run_files.training_summary(os.path.join(runs, name))) as f:
      return json.load(f)
  pre = load("zh_pretrain")
  before, after = pre["initial_eval_metrics"], pre["eval_metrics"]
  print(f"MLM accuracy on held-out People's Daily: {before['mlm_accuracy']:.4f} before, "
        f"{after['mlm_accuracy']:.4f} after pretraining (NSP accuracy "
        f"{before['nsp_accuracy']:.3f} -> {after['nsp_accuracy']:.3f})")
  for kind in ("pretrained", "scratch"):
    values = [load(f"zh_sentiment_{kind}_seed{s}")["eval_metrics"]["accuracy"]
              for s in seeds]
    print(f"Review sentiment, 2,000 held-out, {kind:10}: "
          f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f} "
          f"(seeds {list(seeds)}: {', '.join(f'{v:.4f}' for v in values)})")


if __name__ == "__main__":
  main(commands={"zh-report": zh_report})
