"""A restored bertexp model written as an ONNX graph for ONNX Runtime.

The graph is built node by node from the Keras model's own weights (the
run's checkpoint stays the source of truth) in the fused form ONNX Runtime's
transformer optimizer would produce: one EmbedLayerNormalization, then per
block one Attention (query, key and value as one [H, 3H] matmul, the padding
mask applied as the -10000 bias bertexp trains with), SkipLayerNormalization
around each residual and BiasGelu / FastGelu on the feed-forward layer (all
in ONNX Runtime's `com.microsoft` domain), then the task's head.

It fits every encoder family whose embeddings and blocks are BERT's layers
(`modeling.Embeddings`, `modeling.TransformerBlock`): BERT, ELECTRA and
ALBERT (their factorised embeddings' projection as a MatMul + Add; ALBERT's
shared block written once and run L times), RoBERTa and XLM-R (positions
counted after the padding row, from the encoder's `onnx_position_ids`; one
token type, its row added to the position table). DeBERTa's relative
attention and MobileBERT's bottlenecks have no fused form: a one-line error
names the family.

Inputs are serving_default's: int32 input_word_ids, input_mask and
input_type_ids [B, S]. Outputs are serving_default's too, written by the
task's head writer (bertexp/tasks/<task>/onnx_head.py): classification
`probabilities` [B, L] and `label` [B] (its name), regression `value` [B],
question answering `start_logits` and `end_logits` [B, S].

Shape legend: B batch, S sequence length, H hidden size, I intermediate
size, L labels.
"""
import numpy as np

OPSET = 17               # LayerNormalization-era default domain
IR_VERSION = 10
MS_DOMAIN = "com.microsoft"
INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")
# The padding bias of bertexp's attention (BertEncoder: (1 - mask) * -10000).
MASK_FILTER_VALUE = -10000.0


class GraphBuilder:
  """Collects nodes and initializers with unique names."""

  def __init__(self):
    import onnx.helper  # noqa: F401  (fails early without the onnx extra)
    self.nodes, self.initializers = [], []
    self._count = 0
    self._shared = {}

  def name(self, prefix):
    self._count += 1
    return f"{prefix}_{self._count}"

  def constant(self, prefix, array, key=None):
    """An initializer holding `array`; returns its name. With `key`, a
    second call with the same key returns the first one's initializer (a
    block's weights written once however often the block runs)."""
    from onnx import numpy_helper
    if key is not None and key in self._shared:
      return self._shared[key]
    name = self.name(prefix)
    self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
    if key is not None:
      self._shared[key] = name
    return name

  def node(self, op, inputs, prefix=None, domain=None, outputs=1, **attrs):
    """Adds one node; returns its output name (or names when outputs > 1)."""
    from onnx import helper
    names = [self.name(prefix or op.lower()) for _ in range(outputs)]
    self.nodes.append(helper.make_node(op, list(inputs), names,
                                       name=self.name(op), domain=domain,
                                       **attrs))
    return names[0] if outputs == 1 else names


def _numpy(variable):
  return np.asarray(variable.numpy(), dtype=np.float32)


def _activation(graph, name, x, bias):
  """The feed-forward activation of bert_config's hidden_act on x + bias.

  Raises:
    ValueError: an activation the graph cannot express.
  """
  name = name.lower()
  if name == "gelu":          # exact (erf), as bertexp computes it
    return graph.node("BiasGelu", [x, bias], domain=MS_DOMAIN)
  if name in ("gelu_tanh", "gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
    return graph.node("FastGelu", [x, bias], domain=MS_DOMAIN)
  added = graph.node("Add", [x, bias])
  if name == "relu":
    return graph.node("Relu", [added])
  if name == "tanh":
    return graph.node("Tanh", [added])
  if name in ("swish", "silu"):
    return graph.node("Mul", [added, graph.node("Sigmoid", [added])])
  raise ValueError(f"export-onnx: hidden_act {name!r} has no ONNX form")


def dense(graph, x, layer, prefix):
  """x [.., in] @ kernel + bias of a Keras Dense layer."""
  product = graph.node("MatMul", [x, graph.constant(f"{prefix}_kernel",
                                                    _numpy(layer.kernel))])
  return graph.node("Add", [product, graph.constant(f"{prefix}_bias",
                                                    _numpy(layer.bias))])


def _embeddings(graph, encoder):
  """EmbedLayerNormalization of word + position + token-type embeddings
  [B, S, E], then the projection to H where the family has one."""
  embeddings, config = encoder.embeddings, encoder.config
  positions = _numpy(embeddings.position_embeddings)
  types = ["input_type_ids",
           graph.constant("type_embeddings", _numpy(embeddings.type_embeddings))]
  if not config.reads_type_ids:        # one type: its row on every token
    positions = positions + _numpy(embeddings.type_embeddings)[0]
    types = ["", ""]
  position_ids = encoder.onnx_position_ids(graph)
  x = graph.node(
      "EmbedLayerNormalization",
      ["input_word_ids", types[0],
       graph.constant("word_embeddings", _numpy(embeddings.word_embeddings)),
       graph.constant("position_embeddings", positions), types[1],
       graph.constant("embeddings_gamma", _numpy(embeddings.layer_norm.gamma)),
       graph.constant("embeddings_beta", _numpy(embeddings.layer_norm.beta))] +
      (["", position_ids] if position_ids else []),
      domain=MS_DOMAIN, outputs=2, epsilon=config.layer_norm_eps)[0]  # [B, S, E]
  if encoder.embeddings_project is not None:
    x = dense(graph, x, encoder.embeddings_project, "embeddings_project")
  return x                                                           # [B, S, H]


def _block(graph, x, block, config, index):
  """One Transformer block: [B, S, H] -> [B, S, H] (a block that runs
  several times, ALBERT's, has its weights written once)."""
  p = f"layer_{index}"
  graph = _SharedWeights(graph, block)
  qkv_kernel = np.concatenate([_numpy(block.query.kernel),
                               _numpy(block.key.kernel),
                               _numpy(block.value.kernel)], axis=1)  # [H, 3H]
  qkv_bias = np.concatenate([_numpy(block.query.bias), _numpy(block.key.bias),
                             _numpy(block.value.bias)])              # [3H]
  context = graph.node(
      "Attention", [x, graph.constant(f"{p}_qkv_kernel", qkv_kernel),
                    graph.constant(f"{p}_qkv_bias", qkv_bias), "input_mask"],
      domain=MS_DOMAIN, num_heads=config.num_attention_heads,
      mask_filter_value=MASK_FILTER_VALUE)                           # [B, S, H]
  attention = graph.node("MatMul", [context, graph.constant(
      f"{p}_attention_output_kernel", _numpy(block.attention_output.kernel))])
  h = _skip_layer_norm(graph, attention, x, block.attention_output.bias,
                       block.attention_layer_norm, config, f"{p}_attention")
  inner = graph.node("MatMul", [h, graph.constant(
      f"{p}_intermediate_kernel", _numpy(block.intermediate.kernel))])
  inner = _activation(graph, config.hidden_act, inner, graph.constant(
      f"{p}_intermediate_bias", _numpy(block.intermediate.bias)))    # [B, S, I]
  ffn = graph.node("MatMul", [inner, graph.constant(
      f"{p}_output_kernel", _numpy(block.output_dense.kernel))])
  return _skip_layer_norm(graph, ffn, h, block.output_dense.bias,
                          block.output_layer_norm, config, f"{p}_output")


class _SharedWeights:
  """A GraphBuilder whose constants are keyed by (block, name prefix
  without the layer index): each block's weights are written once."""

  def __init__(self, graph, block):
    self._graph, self._block = graph, block

  def constant(self, prefix, array):
    return self._graph.constant(prefix, array, key=(
        id(self._block), prefix.split("_", 2)[-1]))

  def node(self, *args, **kwargs):
    return self._graph.node(*args, **kwargs)


def _skip_layer_norm(graph, x, skip, bias, layer_norm, config, prefix):
  """LayerNorm(x + bias + skip), one fused node."""
  return graph.node(
      "SkipLayerNormalization",
      [x, skip, graph.constant(f"{prefix}_gamma", _numpy(layer_norm.gamma)),
       graph.constant(f"{prefix}_beta", _numpy(layer_norm.beta)),
       graph.constant(f"{prefix}_bias", _numpy(bias))],
      domain=MS_DOMAIN, epsilon=config.layer_norm_eps)


def encoder_output(graph, encoder):
  """The encoder's sequence output [B, S, H].

  Raises:
    ValueError: a TF-Hub SavedModel encoder (no weights of its own to
      write) or a family whose layers are not BERT's (names the family).
  """
  from bertexp.model import encoders
  from bertexp.model import modeling
  if isinstance(encoder, encoders.SavedModelEncoder):
    raise ValueError("export-onnx writes bertexp's own encoders; this "
                     f"model's encoder is a {type(encoder).__name__}")
  config = encoder.config
  # Families of other layers (ModernBERT has no `embeddings` layer at all).
  if type(getattr(encoder, "embeddings", None)) is not modeling.Embeddings or any(
      type(block) is not modeling.TransformerBlock for block in encoder.blocks):
    raise ValueError(
        "export-onnx writes ONNX Runtime's fused BERT layers, which the "
        f"{encoders.family_of(config).name!r} encoder family's layers do not "
        "fit (export a SavedModel: bertexp train --mode=export)")
  x = _embeddings(graph, encoder)
  for index, block in enumerate(encoder.blocks):
    x = _block(graph, x, block, config, index)
  return x


def pooled_output(graph, sequence, encoder):
  """The pooler's activation (BERT's tanh, ELECTRA's GELU) of its Dense on
  sequence[:, 0]: [B, H]."""
  first = graph.node("Gather", [sequence, graph.constant(
      "first_token", np.array(0, np.int64))], axis=1)               # [B, H]
  product = graph.node("MatMul", [first, graph.constant(
      "pooler_kernel", _numpy(encoder.pooler.kernel))])
  return _activation(graph, encoder.POOLER_ACTIVATION, product,
                     graph.constant("pooler_bias", _numpy(encoder.pooler.bias)))


def pooled_sentence(graph, sequence, mode, normalize):
  """One vector per sentence [B, H] from the sequence output, as
  bertexp.tasks.embedding.pooling.pool computes it: "mean" over the real
  tokens (input_mask), "cls" (the first token) or "max" over the real
  tokens, then optionally divided by its L2 norm (at least 1e-12).

  Raises:
    ValueError: an unknown mode.
  """
  axis = graph.constant("sequence_axis", np.array([1], np.int64))
  if mode == "cls":
    pooled = graph.node("Gather", [sequence, graph.constant(
        "first_token", np.array(0, np.int64))], axis=1)             # [B, H]
  elif mode in ("mean", "max"):
    mask = graph.node("Unsqueeze", [
        graph.node("Cast", ["input_mask"], to=1),
        graph.constant("last_axis", np.array([2], np.int64))])       # [B, S, 1]
    if mode == "mean":
      total = graph.node("ReduceSum", [graph.node("Mul", [sequence, mask]),
                                       axis], keepdims=0)            # [B, H]
      count = graph.node("ReduceSum", [mask, axis], keepdims=0)      # [B, 1]
      pooled = graph.node("Div", [total, graph.node("Max", [
          count, graph.constant("least_count", np.array(1e-9, np.float32))])])
    else:
      real = graph.node("Cast", [mask], to=9)                       # bool
      lowest = graph.constant("lowest", np.array(
          np.finfo(np.float32).min, np.float32))
      pooled = graph.node("ReduceMax", [graph.node(
          "Where", [real, sequence, lowest])], axes=[1], keepdims=0)
  else:
    raise ValueError(f"pooling mode {mode!r}: expected mean, cls or max")
  if not normalize:
    return pooled
  norm = graph.node("ReduceL2", [pooled], axes=[1], keepdims=1)      # [B, 1]
  return graph.node("Div", [pooled, graph.node("Max", [
      norm, graph.constant("least_norm", np.array(1e-12, np.float32))])])


# A task's head writer (what its `onnx_head` returns, in its own folder) is
# called as writer(graph, model) with the task's serving model (weights
# restored) and returns ({output name: tensor}, {output name: (element type,
# shape)}), element types "float" or "string", shapes of named or sized
# dimensions; it builds on `encoder_output`, `pooled_output` and `dense`.


def model_proto(graph, outputs, output_shapes, producer):
  """The ModelProto of `graph` with serving_default's names.

  Args:
    graph: the GraphBuilder.
    outputs: {output name: the graph's tensor name}.
    output_shapes: {output name: ("float" | "string", shape)}.
    producer: the producer string (e.g. "bertexp 0.1.0").
  """
  from onnx import TensorProto, helper
  element_types = {"float": TensorProto.FLOAT, "string": TensorProto.STRING}
  for name, tensor in outputs.items():    # serving_default's output names
    graph.nodes.append(helper.make_node("Identity", [tensor], [name],
                                        name=f"output_{name}"))
  inputs = [helper.make_tensor_value_info(name, TensorProto.INT32,
                                          ["batch", "sequence"])
            for name in INPUT_NAMES]
  value_infos = [helper.make_tensor_value_info(name, element_types[kind],
                                               shape)
                 for name, (kind, shape) in output_shapes.items()]
  proto = helper.make_graph(graph.nodes, "bertexp", inputs, value_infos,
                            initializer=graph.initializers)
  model = helper.make_model(
      proto, producer_name=producer,
      opset_imports=[helper.make_opsetid("", OPSET),
                     helper.make_opsetid(MS_DOMAIN, 1)])
  # IR 10: what ONNX Runtime 1.17 and newer load (onnx 1.19 writes 12).
  model.ir_version = IR_VERSION
  return model
