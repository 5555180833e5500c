"""TF Serving's `--ssl_config_file` (bertexp.serving.server.tls) read
without a server, on self-signed certificates openssl makes here: the
fields, client verification, and the files it refuses with one error
naming the file. Serving over TLS (a plaintext client refused) is in
tests/e2e/test_serving_lifecycle.py."""
import json
import ssl
import subprocess

import pytest

from bertexp.serving.server import tls


def _self_signed(folder, name):
  """(certificate PEM, key PEM) of a new self-signed certificate."""
  key, cert = folder / f"{name}.key", folder / f"{name}.pem"
  subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", str(key), "-out", str(cert), "-days", "2",
                  "-subj", f"/CN={name}"], check=True, capture_output=True)
  return cert.read_text(), key.read_text()


@pytest.fixture(scope="module")
def pems(tmp_path_factory):
  folder = tmp_path_factory.mktemp("pems")
  return {name: _self_signed(folder, name) for name in ("server", "ca")}


def _config(tmp_path, **fields):
  """An SSLConfig text proto with `fields` (strings quoted as TF Serving's
  files quote them)."""
  path = tmp_path / "ssl.config"
  path.write_text("".join(
      f"{name}: {json.dumps(value)}\n" for name, value in fields.items()))
  return str(path)


def test_the_server_key_and_certificate_are_read(pems, tmp_path):
  cert, key = pems["server"]
  config = tls.read_ssl_config(_config(tmp_path, server_key=key,
                                       server_cert=cert))
  assert (config.server_key, config.server_cert) == (key, cert)
  assert not config.client_verify and config.custom_ca == ""
  context = config.ssl_context()
  assert context.verify_mode == ssl.CERT_NONE
  assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_client_verify_requires_certificates_from_the_custom_ca(pems, tmp_path):
  cert, key = pems["server"]
  ca, _ = pems["ca"]
  config = tls.read_ssl_config(_config(
      tmp_path, server_key=key, server_cert=cert, custom_ca=ca,
      client_verify=True))
  assert config.client_verify and config.custom_ca == ca
  context = config.ssl_context()
  assert context.verify_mode == ssl.CERT_REQUIRED
  assert [c["subject"] for c in context.get_ca_certs()] == [
      ((("commonName", "ca"),),)]


def test_refused_files_are_named(pems, tmp_path):
  cert, key = pems["server"]
  _, other_key = pems["ca"]
  cases = [
      (dict(server_cert=cert), "server_key must hold the PEM text itself"),
      (dict(server_key=key, server_cert="/etc/ssl/cert.pem"),
       "server_cert must hold the PEM text itself"),
      (dict(server_key=key, server_cert=cert, client_verify=True),
       "client_verify needs custom_ca"),
      (dict(server_key=other_key, server_cert=cert),
       "server_key / server_cert: "),
  ]
  for fields, message in cases:
    path = _config(tmp_path, **fields)
    with pytest.raises(ValueError) as error:
      tls.read_ssl_config(path)
    assert str(error.value).startswith(f"{path}: {message}"), error.value
  path = tmp_path / "ssl.config"
  path.write_text(f"server_key: {json.dumps(key)}\nserver_certificate: 1\n")
  with pytest.raises(ValueError) as error:
    tls.read_ssl_config(str(path))
  # text_format's position: line 2, and the field it does not know.
  assert str(error.value).startswith(f"{path}:2:")
  assert "server_certificate" in str(error.value)
