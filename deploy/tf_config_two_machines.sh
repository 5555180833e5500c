#!/usr/bin/env bash
# Two GPU machines, one bertexp process each (MultiWorkerMirroredStrategy).
# Run this on both machines with WORKER_INDEX=0 on the first (the chief: it
# writes MODEL_DIR) and WORKER_INDEX=1 on the second. Both need the same
# data and MODEL_DIR paths (a shared disk or gs://), and port 2222 open
# between them.
set -euo pipefail
: "${WORKER_INDEX:?set WORKER_INDEX=0 on the first machine, 1 on the second}"
HOSTS="${HOSTS:-machine-a:2222,machine-b:2222}"
IFS=, read -r FIRST SECOND <<< "$HOSTS"
export TF_CONFIG="{\"cluster\": {\"worker\": [\"$FIRST\", \"$SECOND\"]}, \"task\": {\"type\": \"worker\", \"index\": $WORKER_INDEX}}"
exec bertexp train --gin_file=glue/mnli_base.gin --gin_file=runtime/multi_worker_gpu.gin \
  --gin_param="MODEL_DIR=\"${MODEL_DIR:-gs://my-bucket/runs/mnli}\"" "$@"
