"""The one LSTM time loop of the inference path (:func:`lstm_steps`), which every engine runs.

A layer's D directions (2 interleaved, or 1 on a direction thread) step together over the step-ordered rows: the
recurrent product, the gate and cell math (:func:`cell_update`), the projection, the clip. The engines differ only
in their products, handed over as data: per direction a :class:`StepWeight` (the dense matrix, and the pack of
its family where one serves these rows: int8, oneDNN bf16 or float32, MKL float32), or for small float32 weights one
stacked matrix for both directions (one batched product per step). :class:`LayerSteps` holds them with the
engine's input projection and runs the loop chunk by chunk.

On CPU the engines of float32 and of the low precisions (int8, bf16) run the loop compiled by TorchScript, one
direction at a time: at batch 1 a step is two products and a dozen tiny ops; run from Python, each op pays the
interpreter and a GIL release and re-acquire, and with the two directions on two threads they queue for the GIL
behind each other; one direction at a time also keeps one direction's weights in the core's cache
(benchmarks/RESULTS.md). TorchScript runs the same aten ops without the GIL. ``torch.jit.script`` is in
maintenance mode (torch 2.x warns that it is deprecated); where it is missing or fails, :func:`compiled` returns
None and the same function runs from Python. The plain engine elsewhere (CUDA, the emulated precisions on CPU)
runs it from Python, both directions interleaved.

:func:`cell_update` and :func:`retire_ended_rows` are the inference path's one copy of each (the reference path,
:meth:`..lstm.ProjectedLSTMCell.run`, keeps its own autograd-friendly form, :func:`..lstm.cell_step`, which
:func:`cell_update` is tested equal to); ``tests/architecture/`` checks that no other module of the engines has a time
loop.
"""

import logging  # no "from __future__ import annotations": TorchScript reads the NamedTuples' types
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Optional, Union

import torch

from ..lstm import ProjectedLSTMCell
from ..threads import ForkSafeLock

try:  # torch's custom class of packed linear weights (builds with quantized kernels)
    LinearPacked: Any = torch.classes.quantized.LinearPackedParamsBase
except (AttributeError, RuntimeError):  # no quantized kernels: int8 is refused before this is used
    LinearPacked = Any

_lock = ForkSafeLock()
_LOOP = "lstm_steps"
_compiled: dict[str, Optional[Callable[..., Any]]] = {}
logger = logging.getLogger(__name__)  # a child of the "spacy_elmo" logger
# input_projection(rows (D, N, in)) -> gates[d] = rows[d] @ input_weight[d] + bias[d]: one (D, N, 4 * cell) tensor, or
# one (N, 4 * cell) tensor per direction (the compiled loop's engines: each product's own result, no copy into a buffer)
Gates = Union[torch.Tensor, list[torch.Tensor]]
InputProjection = Callable[[torch.Tensor], Gates]


def cell_update(
    g: torch.Tensor, c: torch.Tensor, cell_clip: float, sigmoid_tanh: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's gate and cell math: gates ``g`` (``[..., 4 * cell]``, TF order i, j, f, o; overwritten) and the
    previous cell ``c`` -> ``(o * tanh(c'), c')``, with ``c'`` clipped to ``cell_clip`` (0: no clip).

    The reference's arithmetic (:func:`...lstm.cell_step`, which ``tests/bilm/test_inference_path.py`` holds this
    to), in the form the inference loop needs: in place in the loop's gate buffer (no new tensor per gate), on 2-D or
    3-D (direction-stacked) rows, typed for TorchScript (a float clip, 0 for none), and with
    ``sigmoid_tanh`` (chosen by :func:`...threads.use_sigmoid_tanh`): tanh(x) as 2 sigmoid(2x) - 1, one sigmoid over
    all four gate blocks (within 1e-7).
    """
    c_dim = c.shape[-1]
    i = g.narrow(-1, 0, c_dim)
    j = g.narrow(-1, c_dim, c_dim)
    f = g.narrow(-1, 2 * c_dim, c_dim)
    o = g.narrow(-1, 3 * c_dim, c_dim)
    if sigmoid_tanh:
        j.mul_(2)
        g.sigmoid_()
        c = torch.addcmul(f * c, i, j, value=2).sub_(i)
    else:
        j = torch.tanh(j)
        g.sigmoid_()  # i, f, o (the sigmoid of the j block is unused)
        c = torch.addcmul(f * c, i, j)
    if cell_clip != 0.0:
        c.clamp_(-cell_clip, cell_clip)
    if sigmoid_tanh:  # o * tanh(c) = 2 o sigmoid(2c) - o
        hid = torch.mul(c, 2).sigmoid_().mul_(o).mul_(2).sub_(o)
    else:
        hid = torch.tanh(c).mul_(o)
    return hid, c


def retire_ended_rows(c: torch.Tensor, last_c: torch.Tensor, n: int) -> torch.Tensor:
    """Rows ``n..`` of cell ``c`` (``[..., rows, cell]``) ended at the previous step: keep their final cell in
    ``last_c``; returns the ``n`` rows still running."""
    rows = c.shape[-2]
    if n < rows:
        last_c.narrow(-2, n, rows - n).copy_(c.narrow(-2, n, rows - n))
        c = c.narrow(-2, 0, n)
    return c


class StepWeight(NamedTuple):
    """One direction's weight of one step product, in the forms its engine holds; the first that serves runs.

    ``int8``: packed params (the weight's one int8 copy), quantizing activations to 7 bits where
    ``int8_reduce_range`` (:func:`.int8.int8_kernels`). ``onednn`` (bf16, float32) or ``mkl``: a pack for products of
    ``min_rows``..``max_rows`` rows (its family's cost model). ``dense``: the ``(in, out)`` matrix, for every other
    product.
    """

    dense: Optional[torch.Tensor]
    int8: Optional[LinearPacked] = None
    int8_reduce_range: bool = False
    onednn: Optional[torch.Tensor] = None
    mkl: Optional[torch.Tensor] = None
    min_rows: int = 0
    max_rows: int = 0


class StepProduct(NamedTuple):
    """One step product for the D directions: each direction's :class:`StepWeight`, or ``stacked`` ``(D, in, out)``,
    all directions' dense matrices in one tensor for one batched product (small weights, directions interleaved)."""

    weights: list[StepWeight]
    stacked: Optional[torch.Tensor] = None


@torch.jit.ignore
def _mkl_product(rows: torch.Tensor, pack: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """``rows @ dense`` through MKL's pack, as :func:`.mkl.linear` (a call back into Python from the compiled loop:
    TorchScript never looks inside, so builds without MKL compile the loop too)."""
    return torch.ops.mkl._mkl_linear(rows, pack, dense.t(), None, rows.shape[0])


def _dense(weight: StepWeight) -> torch.Tensor:
    dense = weight.dense
    assert dense is not None, "a step weight without a pack for these rows needs its dense matrix"
    return dense


def _packed(rows: torch.Tensor, weight: StepWeight, n: int) -> Optional[torch.Tensor]:
    """``rows`` (``n`` of them) ``@ weight`` through its pack, as a new tensor; None where the dense matrix serves."""
    int8 = weight.int8
    if int8 is not None:
        return torch.ops.quantized.linear_dynamic(rows.contiguous(), int8, weight.int8_reduce_range)
    onednn = weight.onednn
    if onednn is not None and weight.min_rows <= n and n <= weight.max_rows:
        no_scalars: list[Optional[Union[int, float, complex]]] = []  # TorchScript's type of the op's Scalar?[]
        return torch.ops.mkldnn._linear_pointwise(rows, onednn, None, "none", no_scalars, "")
    mkl = weight.mkl
    if mkl is not None and weight.min_rows <= n and n <= weight.max_rows:
        return _mkl_product(rows, mkl, _dense(weight))
    return None


def lstm_steps(
    gx: torch.Tensor,
    out: torch.Tensor,
    last_c: torch.Tensor,
    c: torch.Tensor,
    h_prev: Optional[torch.Tensor],
    step_sizes: list[int],
    step_offsets: list[int],
    start_row: int,
    state: StepProduct,
    projection: StepProduct,
    cell_clip: float,
    proj_clip: float,
    sigmoid_tanh: bool,
) -> tuple[Optional[torch.Tensor], torch.Tensor]:
    """Steps ``step_sizes`` of D directions (step-ordered rows from ``start_row`` on; tensors ``(D, rows, dim)``, or
    one direction's ``(rows, dim)`` with one weight per product); returns the last ``(h, c)``. The one LSTM time
    loop: the engines differ only in their ``state`` and ``projection``.

    ``gx`` holds the chunk's input projections and becomes the gates in place; ``out`` receives the projected
    outputs; rows that end keep their cell in ``last_c``. ``h_prev`` None is the zero state (no recurrent
    product). A clip of 0 means none. Compiled by :func:`compiled`, or run as it is from Python: the same ops in
    the same order either way.
    """
    one = gx.dim() == 2  # one direction's 2-D tensors: no per-direction views to take at each step
    for k in range(len(step_sizes)):
        n = step_sizes[k]
        c = retire_ended_rows(c, last_c, n)
        begin = step_offsets[k] - start_row
        g = gx[begin : begin + n] if one else gx[:, begin : begin + n]  # the gates, in place in gx
        if h_prev is not None:  # None: the zero state adds nothing
            stacked = state.stacked
            if stacked is not None:
                g.baddbmm_(h_prev[:, :n], stacked)
            else:
                for d in range(len(state.weights)):
                    g_d, rows = (g, h_prev[:n]) if one else (g[d], h_prev[d, :n])
                    recurrent = _packed(rows, state.weights[d], n)
                    if recurrent is None:
                        g_d.addmm_(rows, _dense(state.weights[d]))
                    else:
                        g_d.add_(recurrent)
        hid, c = cell_update(g, c, cell_clip, sigmoid_tanh)
        row = step_offsets[k]
        h = out[row : row + n] if one else out[:, row : row + n]
        stacked = projection.stacked
        if stacked is not None:
            torch.bmm(hid, stacked, out=h)
        else:
            for d in range(len(projection.weights)):
                hid_d, h_d = (hid, h) if one else (hid[d], h[d])
                projected = _packed(hid_d, projection.weights[d], n)
                if projected is None:
                    torch.mm(hid_d, _dense(projection.weights[d]), out=h_d)
                else:
                    h_d.copy_(projected)
        if proj_clip != 0.0:
            h.clamp_(-proj_clip, proj_clip)
        h_prev = h
    return h_prev, c


def compiled() -> Optional[Callable[..., Any]]:
    """:func:`lstm_steps` compiled by TorchScript (once per process), or None where that is unavailable."""
    if _LOOP in _compiled:
        return _compiled[_LOOP]
    with _lock:
        if _LOOP not in _compiled:
            try:
                with warnings.catch_warnings():  # torch 2.x flags torch.jit.script as deprecated
                    warnings.simplefilter("ignore", DeprecationWarning)
                    warnings.simplefilter("ignore", FutureWarning)
                    _compiled[_LOOP] = torch.jit.script(lstm_steps)
                logger.debug("LSTM steps: TorchScript loop compiled")
            except Exception as err:  # no TorchScript, or it cannot compile this: the Python loop runs instead
                _compiled[_LOOP] = None
                logger.debug(
                    "LSTM steps: TorchScript unavailable (%s: %s); the Python loop runs", type(err).__name__, err
                )
    return _compiled[_LOOP]


def loop_kind() -> str:
    """How the compiled step loop runs here, for the low-precision engines' log lines."""
    return "TorchScript" if compiled() is not None else "Python (no TorchScript)"


@dataclass
class LayerSpec:
    """One LSTM layer's call, as the inference path hands it to :meth:`Engine.layer_steps`.

    ``cells``: one per direction (D = 1 or 2); ``batch``: rows at the first step; ``c`` ``(D, batch, cell)``: the
    initial cells (owned: updated in place); ``h0`` ``(D, batch, proj)`` or None (the zero state); clips of 0 mean
    none; ``sigmoid_tanh``: see :func:`cell_update`.
    """

    cells: Sequence[ProjectedLSTMCell]
    batch: int
    c: torch.Tensor
    h0: Optional[torch.Tensor]
    cell_clip: float
    proj_clip: float
    sigmoid_tanh: bool


class LayerSteps:
    """One layer call's products and its run of :func:`lstm_steps`, made once per layer and call by its engine.

    The inference path hands it each chunk of steps: :meth:`project_inputs` (one product per chunk), then
    :meth:`run` (the steps themselves, carrying ``h`` and ``c`` from chunk to chunk), then :meth:`finish`.
    """

    def __init__(
        self,
        spec: LayerSpec,
        input_projection: InputProjection,
        state: StepProduct,
        projection: StepProduct,
        precision: Optional[str] = None,
    ) -> None:
        """``precision`` (``"int8"`` | ``"bfloat16"`` | ``"float32"``): the loop runs compiled (:func:`compiled`) for
        it, one call per direction on its 2-D tensors (``input_projection`` then gives a list, one tensor per
        direction); None: from Python, the D directions interleaved."""
        self.spec, self.input_projection = spec, input_projection
        self.state, self.projection, self.precision = state, projection, precision
        self.c, self.h_prev = spec.c, spec.h0
        self.loop = self.compiled_loop() or lstm_steps  # asked once per layer and call
        # per direction: (its state and projection weights, its h and c between chunks), when run one by one
        self.directions: list[tuple[StepProduct, StepProduct]] = []
        self.cs: list[torch.Tensor] = []
        self.hs: list[Optional[torch.Tensor]] = []
        if precision is not None and state.stacked is None and projection.stacked is None:
            for d in range(len(state.weights)):
                self.directions.append((StepProduct([state.weights[d]]), StepProduct([projection.weights[d]])))
                self.cs.append(spec.c[d])
                self.hs.append(None if spec.h0 is None else spec.h0[d])

    def compiled_loop(self) -> Optional[Callable[..., Any]]:
        """The compiled step loop these steps run, or None (the same loop from Python)."""
        return None if self.precision is None else compiled()

    def project_inputs(self, rows: torch.Tensor) -> Gates:
        """``rows[d] @ input_weight[d] + bias[d] + forget offset``: a chunk's input projections, per direction
        (:data:`Gates`; a list only where the loop runs direction by direction)."""
        return self.input_projection(rows)

    def run(
        self,
        gx: Gates,
        out: torch.Tensor,
        last_c: torch.Tensor,
        step_sizes: list[int],
        step_offsets: list[int],
        start_row: int,
    ) -> None:
        """Steps ``step_sizes`` (step-ordered rows from ``start_row`` on): gates from ``gx`` (overwritten), outputs into
        ``out`` ``(D, N, proj)``, the cells of rows that end into ``last_c``.

        A compiled loop runs each direction as its own call on that direction's 2-D tensors: interleaving two
        directions' small steps in one compiled loop, or taking 3-D views at every step, ran slower at batch 1
        (benchmarks/RESULTS.md); the Python loop interleaves them (fewer interpreter round trips).
        """
        spec = self.spec
        for d, (state, projection) in enumerate(self.directions):
            self.hs[d], self.cs[d] = self.loop(
                gx[d],
                out[d],
                last_c[d],
                self.cs[d],
                self.hs[d],
                step_sizes,
                step_offsets,
                start_row,
                state,
                projection,
                spec.cell_clip,
                spec.proj_clip,
                spec.sigmoid_tanh,
            )
        if self.directions:
            return
        assert isinstance(gx, torch.Tensor), "the interleaved loop needs the directions' gates in one tensor"
        self.h_prev, self.c = self.loop(
            gx,
            out,
            last_c,
            self.c,
            self.h_prev,
            step_sizes,
            step_offsets,
            start_row,
            self.state,
            self.projection,
            spec.cell_clip,
            spec.proj_clip,
            spec.sigmoid_tanh,
        )

    def finish(self, last_c: torch.Tensor) -> None:
        """Write the cells of the rows still running after the last step into ``last_c``."""
        for d, c in enumerate(self.cs):
            last_c[d, : c.shape[0]] = c
        if not self.directions:
            last_c[:, : self.c.shape[1]] = self.c
