"""deploy/tf_serving: TF Serving's files as bertexp serve reads them.
(Cluster manifests are rendered by `bertexp launch`: tests/unit/launch.)"""
import os

from conftest import REPO

DEPLOY = os.path.join(REPO, "deploy")


def test_tf_serving_files_parse_with_tf_serving_protos_and_bertexp_serve():
  """deploy/tf_serving: models.config is a valid ModelServerConfig (TF
  Serving's own proto) naming the folder run_tf_serving.sh mounts, and the
  batching file reads the same in `bertexp serve`."""
  from google.protobuf import text_format
  from tensorflow_serving.config import model_server_config_pb2
  from bertexp.serving.server.batching import BatchingParameters
  folder = os.path.join(DEPLOY, "tf_serving")
  with open(os.path.join(folder, "models.config")) as f:
    config = text_format.Parse(f.read(),
                               model_server_config_pb2.ModelServerConfig())
  (model,) = config.model_config_list.config
  with open(os.path.join(folder, "run_tf_serving.sh")) as f:
    script = f.read()
  assert f'/export:{model.base_path}:ro' in script
  assert "--batching_parameters_file=/config/batching_parameters.txt" in script
  assert BatchingParameters.from_file(os.path.join(
      folder, "batching_parameters.txt")) == BatchingParameters(
          max_batch_size=32, batch_timeout_micros=2000,
          max_enqueued_batches=100, num_batch_threads=2)
