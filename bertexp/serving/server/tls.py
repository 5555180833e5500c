"""TLS for `bertexp serve` from TF Serving's `--ssl_config_file`: a text
proto of TF Serving's SSLConfig message,

    server_key: "-----BEGIN PRIVATE KEY-----\\n..."
    server_cert: "-----BEGIN CERTIFICATE-----\\n..."
    custom_ca: "-----BEGIN CERTIFICATE-----\\n..."   # optional
    client_verify: false                              # optional

holding the PEM texts themselves (not paths), as TF Serving reads them.
TF Serving secures gRPC with it; bertexp secures REST with the same key
too. A plaintext client is refused on both ports.
"""
import dataclasses
import os
import ssl
import tempfile

# TF Serving's tensorflow_serving/config/ssl_config.proto, field for field
# (tensorflow-serving-api does not ship its Python module), so that its
# files parse here exactly as there.
_FIELDS = (("server_key", 1, "TYPE_STRING"), ("server_cert", 2, "TYPE_STRING"),
           ("custom_ca", 3, "TYPE_STRING"), ("client_verify", 4, "TYPE_BOOL"))


def _ssl_config_class():
  from google.protobuf import descriptor_pb2
  from google.protobuf import descriptor_pool
  from google.protobuf import message_factory
  proto = descriptor_pb2.FileDescriptorProto(
      name="tensorflow_serving/config/ssl_config.proto",
      package="tensorflow.serving", syntax="proto3")
  message = proto.message_type.add(name="SSLConfig")
  for name, number, kind in _FIELDS:
    message.field.add(
        name=name, number=number,
        type=getattr(descriptor_pb2.FieldDescriptorProto, kind),
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
  pool = descriptor_pool.DescriptorPool()      # private: no clash with TF's
  pool.Add(proto)
  return message_factory.GetMessageClass(
      pool.FindMessageTypeByName("tensorflow.serving.SSLConfig"))


@dataclasses.dataclass(frozen=True)
class TlsConfig:
  """The server's key and certificate chain (PEM), the CA that client
  certificates must chain to, and whether clients must present one."""
  server_key: str
  server_cert: str
  custom_ca: str = ""
  client_verify: bool = False

  def grpc_credentials(self):
    """grpc.ServerCredentials for `add_secure_port`."""
    import grpc
    return grpc.ssl_server_credentials(
        [(self.server_key.encode(), self.server_cert.encode())],
        root_certificates=self.custom_ca.encode() or None,
        require_client_auth=self.client_verify)

  def ssl_context(self):
    """An ssl.SSLContext for the REST server (TLS 1.2 or newer).

    Raises:
      ValueError: the key does not match the certificate, or a PEM text is
        not one.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # load_cert_chain reads files only: the PEM texts go to a private
    # folder for the call and are removed at once.
    with tempfile.TemporaryDirectory() as folder:
      cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder,
                                                                 "key.pem")
      for path, text in ((cert, self.server_cert), (key, self.server_key)):
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
          f.write(text)
      try:
        context.load_cert_chain(cert, key)
      except ssl.SSLError as e:
        raise ValueError(f"server_key / server_cert: {e.reason or e}") from None
    if self.custom_ca:
      context.load_verify_locations(cadata=self.custom_ca)
    if self.client_verify:
      context.verify_mode = ssl.CERT_REQUIRED
    return context


def read_ssl_config(path):
  """The TlsConfig of TF Serving's SSLConfig text proto at `path`.

  Raises:
    ValueError: a syntax error (with its line), a missing server_key or
      server_cert, or client_verify without custom_ca; each names the file.
  """
  from google.protobuf import text_format
  from bertexp.util import fileio
  config = _ssl_config_class()()
  try:
    text_format.Parse(fileio.read_text(path), config)
  except text_format.ParseError as e:
    raise ValueError(f"{path}:{e}") from None
  for field in ("server_key", "server_cert"):
    if "-----BEGIN" not in getattr(config, field):
      raise ValueError(f"{path}: {field} must hold the PEM text itself "
                       "(-----BEGIN ...), as in TF Serving's SSLConfig")
  if config.client_verify and not config.custom_ca:
    raise ValueError(f"{path}: client_verify needs custom_ca (the CA that "
                     "client certificates are checked against)")
  tls = TlsConfig(config.server_key, config.server_cert, config.custom_ca,
                  config.client_verify)
  try:
    tls.ssl_context()
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None
  return tls
