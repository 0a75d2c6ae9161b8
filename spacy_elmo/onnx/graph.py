"""The biLM as three ONNX graphs, built node by node with ``onnx.helper`` from a loaded model's float32 weights.

Not ``torch.onnx``: the graphs are the same whatever torch version read the weights, and torch is used only to read
them. The token encoder is a graph of its own, so that a runner can keep token vectors per word and run the char CNN
only for words it has not seen (as :class:`~spacy_elmo.bilm.vocab_cache.TokenVectorCache` does on the torch path);
each direction's LSTM stack is one too, so that a runner can run the two at the same time on two threads, as the
torch path does:

- the token encoder (:func:`token_encoder_graph`): char ids ``(tokens, chars)`` int64 -> token vectors
  ``(tokens, projection_dim)``: char embedding, one ``Conv`` per filter width with a max over positions and the
  activation, the highway layers, the projection (:class:`~spacy_elmo.bilm.encoder.CharCNNEncoder`'s arithmetic).
  An ELMoForManyLangs model's (:func:`manylangs_token_encoder_graph`) is built from the same pieces.
- the forward and the backward LSTM stacks (:func:`contextualizer_graph`): token vectors ``(batch, time,
  projection_dim)`` (the sentence markers included) and lengths ``(batch,)`` int64 -> that direction's output of each
  LSTM layer (:class:`~spacy_elmo.bilm.lstm.ElmoBiLSTM`) ``(n_layers, batch, time, projection_dim)``, zero at
  padding. The backward one reads each row reversed within its length (``ReverseSequence``). Each row's steps run
  only as long as the row (torch's packed sequences): a row gives what it gives alone.

Every weight is a constant initializer, the products' right-hand sides 2-D, so ONNX Runtime pre-packs them once; the
recurrent ones live in the ``Scan`` body itself. The input gates of all steps are one product before the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, cast

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import onnx
    from torch import nn

    from ..bilm.encoder import CharCNNEncoder, Highway
    from ..bilm.lstm import ElmoBiLSTM, ProjectedLSTMCell
    from ..bilm.manylangs import ManyLangsTokenEncoder
    from ..bilm.model import BiLM

OPSET = 17  # ReduceMax's axes an attribute, Split's equal parts without a sizes input; ONNX Runtime >= 1.13 runs it
IR_VERSION = 8  # the IR of opset 17: older ONNX Runtime versions load the files too

# the graphs' input and output names, which a runner passes and reads
CHAR_IDS, TOKEN_VECTORS = "char_ids", "token_vectors"
TOKEN_IDS = "token_ids"  # ELMoForManyLangs' token encoder's input: its id rows
TOKENS, LENGTHS, LAYERS = "tokens", "lengths", "layers"
# the graphs' roles: the token encoder and one LSTM stack per direction
TOKEN_ENCODER_ROLE = "token_encoder"
DIRECTIONS = ("forward", "backward")


class GraphBuilder:
    """Nodes and initializers of one graph, each given a fresh name by :meth:`op` / :meth:`const`."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}{hint}_{self._count}"

    def const(self, hint: str, value: np.ndarray) -> str:
        """A constant initializer holding ``value`` (its dtype kept); its name."""
        from onnx import numpy_helper

        name = self._name(hint)
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))  # 0-d stays 0-d
        return name

    def op(self, op_type: str, inputs: list[str], n_outputs: int = 1, **attributes: Any) -> list[str]:
        """A node ``op_type(inputs)`` with ``attributes``; the names of its outputs."""
        from onnx import helper

        outputs = [self._name(op_type.lower()) for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self._name(op_type), **attributes))
        return outputs

    def op1(self, op_type: str, inputs: list[str], **attributes: Any) -> str:
        """:meth:`op` with its one output."""
        return self.op(op_type, inputs, 1, **attributes)[0]

    def rename(self, value: str, name: str) -> None:
        """Make ``value`` also available as ``name`` (a graph output)."""
        self.nodes.append(self._identity(value, name))

    def _identity(self, value: str, name: str) -> onnx.NodeProto:
        from onnx import helper

        return helper.make_node("Identity", [value], [name], name=self._name("Identity"))


def _array(tensor: object) -> np.ndarray:
    """A torch tensor's values as a float32 numpy array (a copy, detached)."""
    return np.array(tensor.detach().cpu().float().numpy(), dtype=np.float32)  # type: ignore[attr-defined]


def _activation(g: GraphBuilder, name: str, x: str) -> str:
    if name == "relu":
        return g.op1("Relu", [x])
    if name == "tanh":
        return g.op1("Tanh", [x])
    raise ValueError(f"unknown char_cnn activation {name!r}: expected 'relu' or 'tanh'")


def _model(g: GraphBuilder, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]):
    """The checked ``ModelProto`` of ``g``'s graph at :data:`OPSET`."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(g.nodes, name, inputs, outputs, g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="spacy-elmo",
        ir_version=IR_VERSION,
    )
    onnx.checker.check_model(model)
    return model


def _char_cnn(g: GraphBuilder, encoder: CharCNNEncoder, char_ids: str, table: np.ndarray, activation: str) -> str:
    """The char CNN's pooled features ``(tokens, n_filters)`` of ``char_ids`` ``(tokens, chars)``: ``table``'s rows
    (the char embedding, as the token format indexes it), one ``Conv`` per filter width, the max over positions, the
    activation (options' ``char_cnn.activation``)."""
    from torch import nn

    chars = g.op1("Gather", [g.const("char_embed", table), char_ids], axis=0)  # (n, chars, dim)
    chars = g.op1("Transpose", [chars], perm=[0, 2, 1])  # (n, dim, chars): Conv's layout
    pooled = []
    for conv in cast(Sequence[nn.Conv1d], encoder.convs):  # (nn.ModuleList is typed as holding plain Modules)
        out = g.op1(
            "Conv",
            [chars, g.const("conv_w", _array(conv.weight)), g.const("conv_b", _array(conv.bias))],
            kernel_shape=[int(conv.kernel_size[0])],
        )  # (n, filters, positions)
        pooled.append(_activation(g, activation, g.op1("ReduceMax", [out], axes=[2], keepdims=0)))
    return g.op1("Concat", pooled, axis=1) if len(pooled) > 1 else pooled[0]


def _highway_layers(g: GraphBuilder, highways: Sequence[Highway], x: str, *, gate_keeps_input: bool = False) -> str:
    """``x`` through the highway layers, ``gate = sigmoid(carry(x))``, ``h = relu(transform(x))``: bilm-tf's
    ``gate * h + (1 - gate) * x``, or with ``gate_keeps_input`` ELMoForManyLangs' ``gate * x + (1 - gate) * h``."""
    for highway in highways:
        # one product for both: columns [carry | transform], each (in, out) as x @ W
        weight = np.concatenate([_array(highway.carry.weight).T, _array(highway.transform.weight).T], axis=1)
        carry_bias, transform_bias = _array(highway.carry.bias), _array(highway.transform.bias)
        both = g.op1("MatMul", [x, g.const("highway_w", weight)])
        carry, transform = g.op("Split", [both], 2, axis=1)
        gate = g.op1("Sigmoid", [g.op1("Add", [carry, g.const("carry_b", carry_bias)])])
        active = g.op1("Relu", [g.op1("Add", [transform, g.const("transform_b", transform_bias)])])
        one_minus = g.op1("Sub", [g.const("one", np.ones((), np.float32)), gate])
        gated, rest = (x, active) if gate_keeps_input else (active, x)
        x = g.op1("Add", [g.op1("Mul", [gate, gated]), g.op1("Mul", [one_minus, rest])])
    return x


def _projection(g: GraphBuilder, linear: nn.Linear, x: str) -> None:
    """``linear(x)``, the token vectors, as the graph's output :data:`TOKEN_VECTORS`."""
    x = g.op1("MatMul", [x, g.const("proj_w", _array(linear.weight).T)])
    g.rename(g.op1("Add", [x, g.const("proj_b", _array(linear.bias))]), TOKEN_VECTORS)


def token_encoder_graph(encoder: CharCNNEncoder, activation: str) -> onnx.ModelProto:
    """The token encoder: ``char_ids`` ``(tokens, chars)`` int64 -> ``token_vectors`` ``(tokens, projection_dim)``.

    ``chars`` may be fewer than 50 columns (a runner cuts trailing padding, as
    :func:`~spacy_elmo.bilm.encoder.trim_padding` does; the max over positions is unchanged) but at least the widest
    filter. ``activation`` is the CNN's (options' ``char_cnn.activation``); the highway layers use ReLU, as bilm-tf.
    """
    from onnx import TensorProto, helper

    g = GraphBuilder()
    x = _char_cnn(g, encoder, CHAR_IDS, _array(encoder.char_embed.weight), activation)  # row 0 (no token) zero
    x = _highway_layers(g, cast("Sequence[Highway]", encoder.highways), x)
    _projection(g, encoder.projection, x)
    return _model(
        g,
        "elmo_token_encoder",
        [helper.make_tensor_value_info(CHAR_IDS, TensorProto.INT64, ["tokens", "chars"])],
        [helper.make_tensor_value_info(TOKEN_VECTORS, TensorProto.FLOAT, ["tokens", encoder.projection_dim])],
    )


def _shifted(table: np.ndarray) -> np.ndarray:
    """``table`` indexed by the +1 ids of an id row: id ``k`` reads row ``k - 1``, id 0 (no token) row 0, as the
    torch encoder's ``(ids - 1).clamp_min(0)`` does."""
    return np.concatenate([table[:1], table])


def manylangs_token_encoder_graph(encoder: ManyLangsTokenEncoder, activation: str) -> onnx.ModelProto:
    """The token encoder: ``token_ids`` ``(tokens, columns)`` int64 -> ``token_vectors`` ``(tokens, projection_dim)``,
    ``columns`` the vocabulary's (the word column, if any, and ``max_chars``). ``activation`` is the CNN's.

    Its input is the id rows of :class:`~spacy_elmo.bilm.manylangs_tokens.ManyLangsVocabulary` (the torch encoder's
    ``token_ids``), every id +1, the word id first in models with word vectors. Where it differs from
    :func:`token_encoder_graph`, as the torch encoder computes: the char CNN runs over all ``max_chars`` positions
    (the padding char has a trained embedding: a runner sends whole rows), the highway keeps its input where the gate
    is open, and the projection reads ``[word vector; highway]``.
    """
    from onnx import TensorProto, helper

    g = GraphBuilder()
    words = encoder.word_embed
    char_ids = TOKEN_IDS
    if words is not None:  # the char ids after the word column
        start, end = np.array([1], np.int64), np.array([encoder.vocabulary.columns], np.int64)
        axes = g.const("axes", np.array([1], np.int64))
        char_ids = g.op1("Slice", [TOKEN_IDS, g.const("start", start), g.const("end", end), axes])
    x = _char_cnn(g, encoder, char_ids, _shifted(_array(encoder.char_embed.weight)), activation)
    x = _highway_layers(g, cast("Sequence[Highway]", encoder.highways), x, gate_keeps_input=True)
    if words is not None:
        word_ids = g.op1("Gather", [TOKEN_IDS, g.const("zero", np.array(0, np.int64))], axis=1)  # (tokens,)
        vectors = g.op1("Gather", [g.const("word_embed", _shifted(_array(words.weight))), word_ids], axis=0)
        x = g.op1("Concat", [vectors, x], axis=1)
    _projection(g, encoder.projection, x)
    return _model(
        g,
        "manylangs_token_encoder",
        [helper.make_tensor_value_info(TOKEN_IDS, TensorProto.INT64, ["tokens", encoder.vocabulary.columns])],
        [helper.make_tensor_value_info(TOKEN_VECTORS, TensorProto.FLOAT, ["tokens", encoder.projection_dim])],
    )


def _clip(g: GraphBuilder, x: str, bound: Optional[float]) -> str:
    """``x`` clamped to ``±bound``; unchanged for None or 0 (no clip, as the torch path)."""
    if not bound:
        return x
    low = g.const("clip_low", np.array(-bound, np.float32))
    high = g.const("clip_high", np.array(bound, np.float32))
    return g.op1("Clip", [x, low, high])


GATE_ORDER = [0, 2, 3, 1]  # TF's gate blocks (i, j, f, o) as (i, f, o, j): the three sigmoid gates side by side


def _gate_columns(weight: np.ndarray) -> np.ndarray:
    """``weight``'s last axis (4 gate blocks in TF order) in :data:`GATE_ORDER`."""
    blocks = np.split(weight, 4, axis=-1)
    return np.ascontiguousarray(np.concatenate([blocks[k] for k in GATE_ORDER], axis=-1))


def _scan_body(cell_module: ProjectedLSTMCell, name: str) -> onnx.GraphProto:
    """The body of one direction's ``Scan`` over one layer (``name`` prefixes its values): one step.

    :func:`~spacy_elmo.bilm.lstm.cell_step`'s arithmetic: ``c' = i * tanh(j) + f * c`` clipped, ``h' = clip((o *
    tanh(c')) @ P)``. The gate columns are in :data:`GATE_ORDER`, so one ``Sigmoid`` covers (i, f, o). The step's
    output is the projection before the clip (the graph clips all steps at once after the ``Scan``); the state the
    clipped one. One direction per ``Scan``: its weights (the recurrent and the projection) stay in a core's cache
    from step to step, where both directions' would not.

    No mask: a ``Scan`` runs one segment of steps over the rows still running through all of it (:func:`_segment_body`).
    """
    from onnx import TensorProto, helper

    body = GraphBuilder(prefix=f"{name}_")
    proj, cell = cell_module.proj_dim, cell_module.cell_dim
    h, c, gates_x = f"{name}_h", f"{name}_c", f"{name}_gates_x"
    state_w = body.const("state_w", _gate_columns(_array(cell_module.state_weight)))
    gates = body.op1("Add", [body.op1("MatMul", [h, state_w]), gates_x])  # (batch, 4 * cell)
    sigmoid_part, j = body.op("Split", [gates, body.const("sizes", np.array([3 * cell, cell], np.int64))], 2, axis=1)
    i, f, o = body.op("Split", [body.op1("Sigmoid", [sigmoid_part])], 3, axis=1)
    new_c = body.op1("Add", [body.op1("Mul", [i, body.op1("Tanh", [j])]), body.op1("Mul", [f, c])])
    new_c = _clip(body, new_c, cell_module.cell_clip)
    hidden = body.op1("Mul", [o, body.op1("Tanh", [new_c])])
    out = body.op1("MatMul", [hidden, body.const("proj_w", _array(cell_module.projection))])  # not yet clipped
    new_h = _clip(body, out, cell_module.proj_clip)
    if new_h == out:  # no clip: a Scan output may not also be a state output
        out = body.op1("Identity", [out])

    def info(value: str, width: int) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(value, TensorProto.FLOAT, ["batch", width])

    inputs = [info(h, proj), info(c, cell), info(gates_x, 4 * cell)]
    outputs = [info(new_h, proj), info(new_c, cell), info(out, proj)]
    return helper.make_graph(body.nodes, f"{name}_step", inputs, outputs, body.initializers)


def _segment_body(cell_module: ProjectedLSTMCell, name: str, segments: _Segments) -> onnx.GraphProto:
    """The body of one direction's ``Loop`` over one layer (``name`` prefixes its values): segment ``k``, a run of
    steps over which the same rows are running (rows are sorted longest first, so a prefix of them), as one ``Scan``
    (:func:`_scan_body`) over those rows; the states carried shrink to them, and the segment's outputs, padded with
    zero rows to the batch, are appended to the outputs so far (``(steps so far, batch, proj)``).

    As torch's packed sequences: a batch of mixed lengths pays for its tokens, not for its padding, and within a
    segment the steps run as fast as in one ``Scan``.
    """
    from onnx import TensorProto, helper

    body = GraphBuilder(prefix=f"{name}_")
    proj, cell = cell_module.proj_dim, cell_module.cell_dim
    k, cond, h, c, done = f"{name}_k", f"{name}_cond", f"{name}_h", f"{name}_c", f"{name}_done"
    zero = body.const("zero", np.array([0], np.int64))
    axis0 = body.const("axis0", np.array([0], np.int64))

    def of_segment(table: str) -> str:
        return body.op1("Gather", [table, k], axis=0)  # segment k's row of a (segments, width) table: (width,)

    running = of_segment(segments.running)
    gates = body.op1("Slice", [segments.packed_gates, of_segment(segments.starts), of_segment(segments.ends), axis0])
    gates = body.op1("Reshape", [gates, of_segment(segments.shapes)])  # (steps, running, 4 * cell)
    h_now = body.op1("Slice", [h, zero, running, axis0])  # the rows still running: a prefix
    c_now = body.op1("Slice", [c, zero, running, axis0])
    new_h, new_c, out = body.op(
        "Scan", [h_now, c_now, gates], 3, body=_scan_body(cell_module, f"{name}_step"), num_scan_inputs=1
    )
    padded = body.op1("Pad", [out, of_segment(segments.pads)])  # (steps, batch, proj): zero rows for stopped ones
    grown = body.op1("Concat", [done, padded], axis=0)
    cond_out = body.op1("Identity", [cond])

    def info(value: str, elem: int, shape: list[Any]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(value, elem, shape)

    inputs = [
        info(k, TensorProto.INT64, []),
        info(cond, TensorProto.BOOL, []),
        info(h, TensorProto.FLOAT, ["rows", proj]),
        info(c, TensorProto.FLOAT, ["rows", cell]),
        info(done, TensorProto.FLOAT, ["steps", "batch", proj]),
    ]
    outputs = [
        info(cond_out, TensorProto.BOOL, []),
        info(new_h, TensorProto.FLOAT, ["running", proj]),
        info(new_c, TensorProto.FLOAT, ["running", cell]),
        info(grown, TensorProto.FLOAT, ["more_steps", "batch", proj]),
    ]
    return helper.make_graph(body.nodes, f"{name}_segment", inputs, outputs, body.initializers)


@dataclass(frozen=True)
class _Segments:
    """Values of the outer graph that a segment's body reads, as int64 tables ``(segments, width)`` of which it reads
    a row: the rows running (``running``), where the segment's input gates start and end among the packed rows
    (``starts``, ``ends``), their shape as ``(steps, running, 4 * cell)`` (``shapes``), ``Pad``'s pads that add the
    stopped rows back (``pads``); and the layer's input gates of every running row of every step, packed time-major
    (``packed_gates``)."""

    running: str
    starts: str
    ends: str
    shapes: str
    pads: str
    packed_gates: str


def contextualizer_graph(lstm: ElmoBiLSTM, direction: str) -> onnx.ModelProto:
    """One direction's LSTM stack: ``tokens`` ``(batch, time, proj)`` float32 and ``lengths`` ``(batch,)`` int64 (each
    >= 1, the markers counted; rows in any order) -> ``layers`` ``(n_layers, batch, time, proj)``: that direction's
    output of each LSTM layer, in the sentence's order (the backward stack reads each row reversed within its length
    and its outputs are put back), zero at padding.

    The two directions of a biLM share nothing but their input, so each is a graph of its own that a runner can run
    on its own thread, as the torch path runs them (benchmarks/RESULTS.md); the token layer is the input itself.
    Inside, the rows are sorted longest first and each layer runs as a ``Loop`` over segments, the runs of steps over
    which the same rows are within their length, each segment one ``Scan`` over those rows only
    (:func:`_segment_body`), as torch's packed sequences do: a batch of mixed lengths pays for its tokens, not for its
    padding, and a batch of one sentence is one ``Scan``. The input gates of all steps are one ``Gemm`` over the
    running rows, packed time-major.
    """
    from onnx import TensorProto, helper

    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    g = GraphBuilder()
    proj, cell = lstm.proj_dim, lstm.cell_dim

    def ints(hint: str, *values: int) -> str:
        return g.const(hint, np.array(values, np.int64))

    batch = g.op1("Shape", [LENGTHS])  # (1,)
    # rows longest first (``order``), and back (``restore``: the position of each row in ``order``)
    lengths, order = g.op("TopK", [LENGTHS, batch], 2, axis=0, largest=1, sorted=1)
    _, restore = g.op("TopK", [order, batch], 2, axis=0, largest=0, sorted=1)
    x = g.op1("Transpose", [g.op1("Gather", [TOKENS, order], axis=0)], perm=[1, 0, 2])  # (time, batch, proj)
    time = g.op1("Slice", [g.op1("Shape", [x]), ints("start", 0), ints("end", 1)])  # (1,)
    positions = g.op1(
        "Range",
        [
            g.const("start", np.array(0, np.int64)),
            g.op1("Squeeze", [time, ints("axes", 0)]),
            g.const("step", np.array(1, np.int64)),
        ],
    )
    valid = g.op1(  # (time, batch): position < length, a prefix of the sorted rows at each step
        "Less", [g.op1("Unsqueeze", [positions, ints("axes", 1)]), g.op1("Unsqueeze", [lengths, ints("axes", 0)])]
    )
    packed_valid = g.op1("Reshape", [valid, ints("flat", -1)])  # (time * batch,), time-major
    valid_float = g.op1("Cast", [g.op1("Unsqueeze", [valid, ints("axes", 0, 3)])], to=TensorProto.FLOAT)
    # segments: the runs of steps between two lengths of the batch, over which the same rows run
    ends_at = g.op1("Unique", [lengths], sorted=1)  # (segments,): ascending, the last the longest length
    starts_at = g.op1("Concat", [ints("zero", 0), g.op1("Slice", [ends_at, ints("start", 0), ints("end", -1)])], axis=0)
    column = ints("axes", 1)
    steps = g.op1("Unsqueeze", [g.op1("Sub", [ends_at, starts_at]), column])  # (segments, 1)
    running = g.op1(  # (segments, 1): the rows whose length reaches the segment's end
        "ReduceSum",
        [
            g.op1(
                "Cast",
                [
                    g.op1(
                        "GreaterOrEqual",
                        [g.op1("Unsqueeze", [lengths, ints("axes", 0)]), g.op1("Unsqueeze", [ends_at, column])],
                    )
                ],
                to=TensorProto.INT64,
            ),
            column,
        ],
        keepdims=1,
    )
    packed_rows = g.op1("Mul", [steps, running])
    packed_ends = g.op1("CumSum", [packed_rows, g.const("axis", np.array(0, np.int64))])
    packed_starts = g.op1("Sub", [packed_ends, packed_rows])
    no_pad = g.op1("Mul", [running, g.const("zero", np.array(0, np.int64))])  # zeros (segments, 1)
    shapes = g.op1(
        "Concat", [steps, running, g.op1("Add", [no_pad, g.const("width", np.array(4 * cell, np.int64))])], axis=1
    )
    stopped = g.op1("Sub", [batch, running])
    pads = g.op1("Concat", [no_pad, no_pad, no_pad, no_pad, stopped, no_pad], axis=1)  # before/after of 3 axes
    n_segments = g.op1("Squeeze", [g.op1("Shape", [ends_at]), ints("axes", 0)])

    def reverse(value: str) -> str:
        """Each row reversed within its length (padding stays in place)."""
        return g.op1("ReverseSequence", [value, lengths], batch_axis=1, time_axis=0)

    def zeros(width: int) -> str:
        """The initial state: zeros ``(batch, width)``."""
        size = g.op1("Concat", [batch, ints("width", width)], axis=0)
        return g.op1("ConstantOfShape", [size], value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))

    no_steps = g.op1(  # the outputs before the first segment: (0, batch, proj)
        "ConstantOfShape",
        [g.op1("Concat", [ints("none", 0), batch, ints("width", proj)], axis=0)],
        value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]),
    )

    backward = direction == "backward"
    data = reverse(x) if backward else x  # the backward stack runs in reversed time throughout
    cells = cast("Sequence[ProjectedLSTMCell]", lstm.backward_layers if backward else lstm.forward_layers)
    axes0 = ints("axes", 0)
    layers = []
    for index, cell_module in enumerate(cells):
        bias = _array(cell_module.bias) + _array(cell_module.forget_offset)  # as the torch path adds them
        # the input gates of every running row of every step: one Gemm, the bias added within it
        rows = g.op1("Compress", [g.op1("Reshape", [data, ints("rows", -1, proj)]), packed_valid], axis=0)
        weight = g.const("input_w", _gate_columns(_array(cell_module.input_weight)))
        packed_gates = g.op1("Gemm", [rows, weight, g.const("bias", _gate_columns(bias))])
        segments = _Segments(running, packed_starts, packed_ends, shapes, pads, packed_gates)
        _, _, out = g.op(
            "Loop",
            [n_segments, "", zeros(proj), zeros(cell), no_steps],
            3,
            body=_segment_body(cell_module, f"l{index}_{direction}", segments),
        )  # (time, batch, proj), zero rows where a row has stopped
        out = _clip(g, out, cell_module.proj_clip)
        if lstm.use_skip_connections and index > 0:
            out = g.op1("Add", [out, data])
        data = out
        layers.append(g.op1("Unsqueeze", [reverse(out) if backward else out, axes0]))
    stacked = g.op1("Concat", layers, axis=0) if len(layers) > 1 else layers[0]  # (n_layers, time, batch, proj)
    masked = g.op1("Mul", [stacked, valid_float])
    in_order = g.op1("Gather", [masked, restore], axis=2)  # the rows as given
    g.rename(g.op1("Transpose", [in_order], perm=[0, 2, 1, 3]), LAYERS)
    return _model(
        g,
        f"elmo_{direction}_lstm",
        [
            helper.make_tensor_value_info(TOKENS, TensorProto.FLOAT, ["batch", "time", proj]),
            helper.make_tensor_value_info(LENGTHS, TensorProto.INT64, ["batch"]),
        ],
        [helper.make_tensor_value_info(LAYERS, TensorProto.FLOAT, [lstm.n_layers, "batch", "time", proj])],
    )


def bilm_graphs(model: BiLM) -> dict[str, onnx.ModelProto]:
    """The graphs of ``model`` by role: ``"token_encoder"``, ELMo's char CNN (:func:`token_encoder_graph`) or
    ELMoForManyLangs' (:func:`manylangs_token_encoder_graph`; another token encoder is refused), and one LSTM stack
    per direction of :data:`DIRECTIONS`."""
    from ..bilm.encoder import CharCNNEncoder
    from ..bilm.manylangs import ManyLangsTokenEncoder

    encoder, activation = model.token_encoder, model.options.activation
    if type(encoder) is CharCNNEncoder:
        tokens = token_encoder_graph(encoder, activation)
    elif type(encoder) is ManyLangsTokenEncoder:
        tokens = manylangs_token_encoder_graph(encoder, activation)
    else:
        raise ValueError(
            f"ONNX export supports ELMo's and ELMoForManyLangs' token encoders, not {type(encoder).__name__}: "
            "export a model in one of those formats"
        )
    graphs = {TOKEN_ENCODER_ROLE: tokens}
    graphs.update((direction, contextualizer_graph(model.lstm, direction)) for direction in DIRECTIONS)
    return graphs


def import_onnx() -> Any:
    """The ``onnx`` module, or an ImportError saying how to install it (exporting needs it; running does not)."""
    try:
        import onnx
    except ImportError:
        raise ImportError(
            "exporting to ONNX needs the onnx package, which is not installed: pip install onnx"
        ) from None
    return onnx


def serialized_graphs(model: BiLM) -> tuple[dict[str, bytes], str]:
    """:func:`bilm_graphs` as bytes by role, with the version of ``onnx`` that built them. A ``ValueError`` (one line)
    for a model the graphs cannot express or one too large for a single ONNX file (protobuf's 2 GB)."""
    onnx = import_onnx()
    graphs = bilm_graphs(model)
    try:
        return {role: graph.SerializeToString() for role, graph in graphs.items()}, onnx.__version__
    except ValueError as err:  # protobuf's 2 GB limit on one message
        raise ValueError(f"the model is too large for one ONNX file ({err}): not exported") from None


__all__ = [
    "DIRECTIONS",
    "OPSET",
    "TOKEN_ENCODER_ROLE",
    "TOKEN_IDS",
    "bilm_graphs",
    "contextualizer_graph",
    "import_onnx",
    "manylangs_token_encoder_graph",
    "serialized_graphs",
    "token_encoder_graph",
]
