#!/bin/sh
# The same export under the real TF Serving (docker image tensorflow/serving),
# with the same batching file `bertexp serve` reads:
#   deploy/tf_serving/run_tf_serving.sh runs/demo
# Then the client commands of docs/serving.md work unchanged (REST on 8501,
# gRPC on 8500, model name "demo").
set -eu
RUN_DIR=$(cd "${1:?usage: run_tf_serving.sh MODEL_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
exec docker run --rm -p 8500:8500 -p 8501:8501 \
  -v "$RUN_DIR/export:/models/demo:ro" \
  -v "$HERE:/config:ro" \
  tensorflow/serving:2.21.0 \
  --model_config_file=/config/models.config \
  --enable_batching --batching_parameters_file=/config/batching_parameters.txt \
  --file_system_poll_wait_seconds=1
