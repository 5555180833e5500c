#!/usr/bin/env bash
# MNLI on a Cloud TPU VM (v3-8), as google-research/bert's README walks
# through it, with bertexp's command. Data, checkpoints and MODEL_DIR live
# in a bucket the TPU VM's service account can write.
set -euo pipefail
ZONE="${ZONE:-europe-west4-a}"; NAME="${NAME:-bertexp-tpu}"; BUCKET="${BUCKET:?gs://your-bucket}"
gcloud compute tpus tpu-vm create "$NAME" --zone="$ZONE" \
  --accelerator-type=v3-8 --version="${VERSION:-tpu-vm-tf-2.21.0-pjrt}"   # a TensorFlow 2.21 TPU VM image: gcloud compute tpus versions list
gcloud compute tpus tpu-vm ssh "$NAME" --zone="$ZONE" --command="
  pip install bertexp-0.1.0-py3-none-any.whl && pip install --no-deps tf-models-official==2.20.0 &&
  bertexp train --gin_file=glue/mnli_tpu.gin --gin_param='TPU_ADDRESS=\"local\"' \
    --gin_param='MODEL_DIR=\"$BUCKET/runs/mnli\"' \
    --gin_param='BERT_CONFIG_FILE=\"$BUCKET/bert_base/bert_config.json\"' \
    --gin_param='INIT_CHECKPOINT=\"$BUCKET/bert_base/bert_model.ckpt\"' \
    --gin_param='TRAIN_DATA_PATH=\"$BUCKET/data/mnli_train.tf_record\"' \
    --gin_param='EVAL_DATA_PATH=\"$BUCKET/data/mnli_eval.tf_record\"' \
    --gin_param='INPUT_META_DATA_PATH=\"$BUCKET/data/mnli_meta_data\"'"
