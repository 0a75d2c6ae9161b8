"""The one conformance test of the inference engines (spacy_elmo.bilm.engine): every engine available here, by
the same checks, against the float32 reference path.

Parametrized over every engine of ``ENGINES`` and every device (``cpu`` always; ``cuda`` marked ``gpu``, skipped
without one); an engine that does not serve a device, or whose kernels this machine lacks (bf16 without native
oneDNN kernels, int8 without quantized engines), is skipped, by name. Checks: the engine's ``tolerance`` (None,
float32 engines: recomputation rounding, ``tests/numerics.py``; else each layer's error relative to its
activation scale, the bounds of ``tests/bilm/test_precision.py``), with the two directions interleaved and on two
threads; batch invariance (a sentence alone and among others); state carried from one call to the next (the same
outputs as one call); weight changes followed (every engine's packs follow the float32 weights they were made
from). The small test models' weights are packed anyway (the engines' size thresholds set to 0) so that every
engine's packed products run.

On the bundled TRAINED model, a property test over repetitive and degenerate input (runs of one token, a phrase
repeated, single characters, 48-byte tokens) for every engine: a precision ``dtype="auto"`` may pick holds its
bound on every such input. (A trained recurrence carries rounding along a run instead of forgetting it: int8 and
bfloat16 exceed their bounds there, which is why "auto" never picks them; docs/precision.md.)
"""

import copy
import importlib
import inspect
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spacy_elmo.bilm import BiLM, batch_to_char_ids, engine, load_model
from spacy_elmo.bilm import threads as threads_module
from spacy_elmo.bilm.engine import int8, mkl, onednn, precisions
from spacy_elmo.bilm.model import bilstm_outputs
from spacy_elmo.sources.model_paths import resolve_model_files
from tests.bilm.test_inference_path import _options, _random_batch, _random_state
from tests.bilm.test_precision import TOLERANCE, TRAINED_FLOAT32_BOUND
from tests.numerics import TWO_FORMULAS_SCALE_ATOL, assert_recomputed_close

ENGINES = engine.ENGINES
DEVICES = [
    pytest.param(torch.device("cpu"), id="cpu"),
    pytest.param(torch.device("cuda"), id="cuda", marks=pytest.mark.gpu),
]


def ready_for(cls, model, device, keep_float32=True):
    """``model`` prepared for ``cls`` on ``device`` (skip, by name, where ``cls`` does not serve it here)."""
    if cls.load_dtype == torch.int8 and not int8.int8_available():
        pytest.skip(f"{cls.name}: this torch has no quantized engine")
    if cls.load_dtype == torch.int8 and device.type != "cpu":
        pytest.skip(f"{cls.name}: CPU only")
    model = engine.prepare(model, device, cls.load_dtype, keep_float32=keep_float32)
    for module in (model.lstm, model.token_encoder):
        if type(engine.engine_of(module)) is not cls:
            pytest.skip(f"{cls.name} does not serve {engine.Target.of(module)} on this machine")
    return model


def force_float32_kernels(cls, monkeypatch):
    """The float32 kernels ``cls`` runs chosen for this test (this CPU's own choice serves only one of the two
    float32 engines): MKL's for the MKL engine and the plain one, oneDNN's for the oneDNN float32 engine."""
    if cls is engine.Float32Engine and not onednn.onednn_float32_available():
        pytest.skip(f"{cls.name}: this torch has no exact oneDNN float32 products")
    choice = "onednn" if cls is engine.Float32Engine else "mkl"
    monkeypatch.setattr(onednn, "float32_kernels", lambda: choice)


def engine_model(cls, device, monkeypatch, keep_float32=True):
    """A random small model (its own initialisation, as test_precision's bounds assume), its float32 copy on CPU,
    and the model ready for ``cls`` on ``device`` (skip if ``cls`` does not serve it here)."""
    monkeypatch.setattr(mkl, "MIN_ELEMENTS", 0)  # pack the small weights too
    monkeypatch.setattr(onednn, "MIN_ELEMENTS", 0)
    force_float32_kernels(cls, monkeypatch)
    if cls is engine.PlainEngine:
        monkeypatch.setattr(mkl, "ENABLED", False)  # the plain engine: what runs without MKL packs
    torch.manual_seed(4)
    exact = BiLM(_options(cell_dim=64, projection_dim=16)).eval()
    return exact, ready_for(cls, copy.deepcopy(exact), device, keep_float32)


def on(device, value):
    """``value`` (a tensor, or nested lists / tuples of them) on ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return type(value)(on(device, v) for v in value)


def layer_errors(low, exact):
    """Per layer: the largest |low - exact| over that layer's largest |exact| (``(layers, batch, time, dim)``)."""
    low, exact = low.float(), exact.float()
    return (low - exact).abs().amax(dim=(1, 2, 3)) / exact.abs().amax(dim=(1, 2, 3))


def assert_within_bound(cls, actual, expected):
    """No tolerance (float32 engines): recomputation rounding (tanh may take the two-sigmoid form); else the
    engine's tolerance, each layer's error over its scale."""
    actual = actual.cpu()
    if cls.tolerance is None:
        assert_recomputed_close(actual.float(), expected.float(), scale_atol=TWO_FORMULAS_SCALE_ATOL)
    else:
        errors = layer_errors(actual, expected)
        assert (errors < cls.tolerance).all(), errors


def state_in(model, state):
    dtype = next(p for p in model.lstm.parameters() if not p.is_meta).dtype
    return [[(h.to(dtype), c.to(dtype)) for h, c in layer] for layer in state]


@pytest.mark.parametrize("direction_threads", [False, True], ids=["interleaved", "direction-threads"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENGINES, ids=lambda cls: cls.name)
def test_engine_within_its_precision_of_float32(cls, device, direction_threads, monkeypatch):
    """Activations and final states, from a random initial state, against the float32 reference path."""
    exact, model = engine_model(cls, device, monkeypatch)
    sentences = _random_batch(seed=6, n=9, longest=15)
    ids = torch.as_tensor(batch_to_char_ids(sentences))
    state = _random_state(exact, len(sentences), 5)
    ref_acts, _, ref_final = exact.requires_grad_(True)(ids, state)  # parameters require grad: the reference path
    if direction_threads:
        monkeypatch.setattr(threads_module, "DIRECTION_THREADS_MIN_MACS", 0)
        saved = torch.get_num_threads()
        torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            acts, _, final = model(ids.to(device), on(device, state_in(model, state)))
    finally:
        if direction_threads:
            torch.set_num_threads(saved)
    assert_within_bound(cls, acts, ref_acts.detach())
    for layer in range(exact.n_layers):
        for d in range(2):
            for ours, ref in zip(final[layer][d], ref_final[layer][d]):
                assert_within_bound(cls, ours[None, None], ref.detach()[None, None])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENGINES, ids=lambda cls: cls.name)
def test_engine_is_batch_invariant(cls, device, monkeypatch):
    """A sentence's activations alone and among longer and shorter ones: float32 rounding for float32 engines,
    the precision's bound for the others (int8 quantizes each product's activations with their own range)."""
    _, model = engine_model(cls, device, monkeypatch)
    sentences = _random_batch(seed=8, n=7, longest=14)
    with torch.inference_mode():
        batch, _, _ = model(torch.as_tensor(batch_to_char_ids(sentences), device=device))
        for row, sentence in enumerate(sentences):
            alone, _, _ = model(torch.as_tensor(batch_to_char_ids([sentence]), device=device))
            assert_within_bound(cls, alone, batch[:, row : row + 1, : len(sentence)].cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENGINES, ids=lambda cls: cls.name)
def test_engine_carries_state_from_call_to_call(cls, device, monkeypatch):
    """The biLSTM over a sequence in two calls, the state of the first carried into the second, gives the
    outputs of one call over the whole sequence."""
    _, model = engine_model(cls, device, monkeypatch)
    dtype = next(p for p in model.lstm.parameters() if not p.is_meta).dtype
    inputs = torch.randn(5, 12, model.options.projection_dim).to(device, dtype)
    lengths = torch.full((5,), 12)
    with torch.inference_mode():
        whole, _, _ = bilstm_outputs(model.lstm, inputs, lengths)
        first, _, state = bilstm_outputs(model.lstm, inputs[:, :7], torch.full((5,), 7))
        second, _, _ = bilstm_outputs(model.lstm, inputs[:, 7:], torch.full((5,), 5), state)
    carried = torch.stack([torch.cat([a, b], dim=1) for a, b in zip(first, second)])
    assert_within_bound(cls, carried, torch.stack(whole).cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENGINES, ids=lambda cls: cls.name)
def test_engine_follows_weight_changes(cls, device, monkeypatch):
    """Weights changed in place (an optimizer step, an edit under ``no_grad``): the engine's packs are remade, and
    the model computes what a model loaded with the new weights computes. (Factors exact in every precision.)"""
    exact, model = engine_model(cls, device, monkeypatch, keep_float32=True)
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=3, n=6)), device=device)
    with torch.inference_mode():
        before, _, _ = model(ids)
    with torch.no_grad():  # in place: the same storage, a new version
        for m in (exact, model):
            for cell in [*m.lstm.forward_layers, *m.lstm.backward_layers]:
                cell.state_weight.mul_(0.5)
            m.token_encoder.highways[0].transform.weight.mul_(-1.0)
    fresh = engine.prepare(copy.deepcopy(exact), device, cls.load_dtype, keep_float32=True)
    with torch.inference_mode():
        after, _, _ = model(ids)
        loaded, _, _ = fresh(ids)
    changed, _, _ = exact.requires_grad_(True)(ids.cpu())  # the reference path on the changed float32 weights
    assert layer_errors(before.cpu(), changed.detach())[1:].max() > 0.1  # the change matters
    assert_recomputed_close(after.float().cpu(), loaded.float().cpu())  # the engine followed it: no stale pack


WORDS = [".", "the", ",", "of", "and", "a", "<unk>", "@-@", '"', "1"]
LONG_TOKENS = ["x" * 48, "\u00e9" * 24, "\u20ac" * 16, "\U0001d11e" * 12]  # 48 bytes of UTF-8 each, 48/24/16/12 chars
DEGENERATE = st.one_of(
    st.builds(lambda word, n: [word] * n, st.sampled_from(WORDS), st.integers(10, 120)),  # a run of one token
    st.builds(  # a short phrase repeated
        lambda phrase, n: (phrase * n)[:120],
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=4),
        st.integers(5, 40),
    ),
    st.lists(st.characters(codec="utf-8", exclude_categories=("Cs", "Z", "Cc")), min_size=1, max_size=60),
    st.lists(st.sampled_from(LONG_TOKENS), min_size=1, max_size=40),
)


@pytest.fixture(scope="module")
def trained():
    """The bundled trained biLM in float32 (its parameters require grad: the reference path)."""
    return load_model(*resolve_model_files("default")).eval().requires_grad_(True)


def auto_picks(dtype: torch.dtype) -> bool:
    """Whether ``dtype="auto"`` picks ``dtype`` on a CPU or a CUDA device."""
    return str(dtype).replace("torch.", "") in {precisions.auto_precision(kind) for kind in ("cpu", "cuda")}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cls", ENGINES, ids=lambda cls: cls.name)
def test_a_precision_auto_picks_holds_its_bound_on_repetitive_input(cls, device, trained, monkeypatch):
    """On the bundled trained model, over runs of one token, repeated phrases, single characters and 48-byte tokens:
    every engine of a precision ``dtype="auto"`` may pick stays within that precision's bound of the float32
    reference path (float32 engines: recomputation rounding, amplified by the trained recurrence). The others run
    (finite, right shape) and are never picked by "auto"."""
    force_float32_kernels(cls, monkeypatch)
    if cls is engine.PlainEngine:
        monkeypatch.setattr(mkl, "ENABLED", False)
    model = ready_for(cls, copy.deepcopy(trained).requires_grad_(False), device, keep_float32=False)
    picked = auto_picks(cls.load_dtype)

    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(sentence=DEGENERATE)
    @example(sentence=["."] * 50)  # the cases measured in `benchmarks/bench_precision.py trained`, always run
    @example(sentence=["the", "cat", "sat"] * 30)
    def holds(sentence):
        ids = torch.as_tensor(batch_to_char_ids([sentence]))
        exact, _, _ = trained(ids)
        with torch.inference_mode():
            ours, _, _ = model(ids.to(device))
        ours = ours.cpu()
        assert ours.shape == exact.shape and bool(ours.float().isfinite().all())
        if picked:
            errors = layer_errors(ours, exact.detach())
            bound = TRAINED_FLOAT32_BOUND if cls.tolerance is None else cls.tolerance
            assert (errors < bound).all(), f"{cls.name} on {sentence[:6]}... ({len(sentence)} tokens): {errors}"

    holds()


def test_every_engine_is_tested_and_named_once():
    """The conformance tests above see every engine, in one explicit order (the precision table's: see below), the
    plain engine last (it serves every target, so an engine after it would never run)."""
    names = [cls.name for cls in ENGINES]
    assert len(set(names)) == len(names) and ENGINES[-1] is engine.PlainEngine
    assert names.index("onednn-float32") < names.index("mkl-float32")  # oneDNN's float32 where it wins, MKL's after
    for target in (
        engine.Target(torch.device("cuda"), torch.float16, False),
        engine.Target(torch.device("meta"), torch.float64, True),
    ):
        assert engine.PlainEngine.serves(target)


def named_engine(path: str) -> type:
    """The engine class a precision row's ``"module.Class"`` names in bilm/engine."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(f"spacy_elmo.bilm.engine.{module}"), name)


def engine_classes() -> set[type]:
    """Every engine class defined in bilm/engine's modules (those with a name: the abstract bases have none)."""
    found = set()
    for path in Path(engine.__file__).parent.glob("[!_]*.py"):
        module = importlib.import_module(f"spacy_elmo.bilm.engine.{path.stem}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, engine.Engine) and cls.__module__ == module.__name__ and "name" in vars(cls):
                found.add(cls)
    return found


def test_the_precision_table_names_every_engine_and_orders_them():
    """ENGINES is the precision table's engines, row by row, then the plain engine; an engine that no row names
    would never be asked (so adding a precision is its engine file and its row), and each row's engines load its
    dtype."""
    named = [(row, named_engine(path)) for row in precisions.PRECISIONS for path in row.engines]
    assert (*(cls for _, cls in named), engine.PlainEngine) == ENGINES
    assert engine_classes() == set(ENGINES)
    assert all(cls.load_dtype == row.dtype() for row, cls in named)


def test_the_precision_table_keeps_the_names_vectors_are_stored_by():
    """dtype names, aliases and vectors' names are cache keys and fingerprints (saved pipelines, disk caches): the
    table's order and words may change, these never."""
    from spacy_elmo.bilm import cpu_support

    assert set(precisions.PRECISION_NAMES) == {"bfloat16", "float16", "float32", "int8"}
    assert set(precisions.VECTOR_PRECISIONS) == {*precisions.PRECISION_NAMES, "bfloat16-cuda", "float16-cuda"}
    assert precisions.ALIASES == {"bf16": "bfloat16", "half": "float16", "fp16": "float16", "float": "float32"} | {
        "qint8": "int8"
    }
    for row in precisions.PRECISIONS:
        assert str(row.dtype()) == f"torch.{row.name}" and row.vectors_on("cpu") == row.name
        if row.native is not None:  # a fact of cpu_support, and a warning that names the CPU's flags
            assert callable(getattr(cpu_support, row.native)) and isinstance(getattr(cpu_support, row.native)(), bool)
            assert "{flags}" in row.emulated and row.emulated.format(flags="F", aten="A").startswith(
                f"precision='{row.name}' has no"
            )


def test_each_engine_tolerance_is_the_documented_bound_of_its_precision():
    """An engine's ``tolerance`` (what the conformance test holds it to) is tests/bilm/test_precision.py's bound for its
    precision, unchanged; float32 engines have none (recomputation rounding)."""
    for cls in ENGINES:
        precision = precisions.of_dtype(cls.load_dtype).name
        assert cls.tolerance == TOLERANCE.get(precision), cls.name


def test_an_engine_precision_is_its_target():
    """The plain engine serves every dtype: its precision is its target's, never a fixed "float32"."""
    for dtype, name in ((torch.float32, "float32"), (torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
        assert engine.PlainEngine(engine.Target(torch.device("cuda"), dtype, False)).precision == name
    assert engine.PlainEngine(engine.Target(torch.device("cpu"), torch.float32, True)).precision == "int8"


@pytest.mark.skipif(not int8.int8_available(), reason="this torch has no quantized engine")
def test_packing_leaves_the_process_wide_quantized_engine_as_it_was():
    """int8 packs are made for the engine each role chose, whatever the process's ``torch.backends.quantized.engine``
    says, and the setting comes back as it was (library code changes no process-wide state)."""
    from spacy_elmo.bilm.engine.int8 import prepack, quantize_weight

    saved = torch.backends.quantized.engine
    engines = [e for e in ("fbgemm", "onednn") if e in torch.backends.quantized.supported_engines]
    q, scale = quantize_weight(torch.randn(16, 32))
    rows = torch.randn(5, 32)
    expected = rows @ (q.float() * scale[:, None]).t()
    try:
        for setting in [*engines, "x86"] if "x86" in torch.backends.quantized.supported_engines else engines:
            torch.backends.quantized.engine = setting
            for wanted in engines:
                packed = prepack(q, scale, wanted)
                assert torch.backends.quantized.engine == setting
                out = torch.ops.quantized.linear_dynamic(rows, packed, True)  # 7 bits: no saturation on any CPU
                assert (out - expected).abs().max() < 0.05 * expected.abs().max()
    finally:
        torch.backends.quantized.engine = saved


def onednn_float32_model(monkeypatch):
    """A small random model served by the oneDNN float32 engine, every weight packed (skip where oneDNN's float32
    products are missing or inexact here)."""
    exact, model = engine_model(engine.Float32Engine, torch.device("cpu"), monkeypatch)
    return exact, model


def test_onednn_float32_one_pack_per_weight_and_no_mkl_packs(monkeypatch):
    """One oneDNN pack per weight, whatever the row counts (batch 1, a batch of several, products past the engine's
    row limit), made once and kept; MKL's packs are never made beside them (the packs replace MKL's)."""
    made: list[tuple[int, ...]] = []
    real_make = onednn.make_pack

    def counting_make(out_in):
        made.append(tuple(out_in.shape))
        return real_make(out_in)

    monkeypatch.setattr(onednn, "make_pack", counting_make)
    monkeypatch.setattr(mkl, "make_pack", lambda out_in: pytest.fail("an MKL pack beside the oneDNN ones"))
    monkeypatch.setattr(mkl, "MIN_ELEMENTS", 0)
    _, model = onednn_float32_model(monkeypatch)
    monkeypatch.setattr(engine.Float32Engine, "max_rows", 24)  # some products past the limit: MKL's GEMM, no pack
    with torch.inference_mode():
        for seed, n in ((1, 1), (2, 5), (3, 9), (4, 1), (5, 9)):
            model(torch.as_tensor(batch_to_char_ids(_random_batch(seed=seed, n=n, longest=15))))
    lstm, encoder = engine.engine_of(model.lstm), engine.engine_of(model.token_encoder)
    assert type(lstm) is engine.Float32Engine and type(encoder) is engine.Float32Engine
    cells = [*model.lstm.forward_layers, *model.lstm.backward_layers]
    linears = [m for m in model.token_encoder.modules() if isinstance(m, torch.nn.Linear)]
    weights = 3 * len(cells) + len(linears)  # each cell's input, state and projection; the encoder's linears
    assert len(lstm.packs) + len(encoder.packs) == weights
    assert len(made) == weights  # made once each, at whichever row count came first


def test_onednn_float32_bit_equal_through_the_same_shapes(monkeypatch):
    """The same batch gives the same bits: again in the same model, and in a fresh copy (packs made anew)."""
    exact, model = onednn_float32_model(monkeypatch)
    ids = torch.as_tensor(batch_to_char_ids(_random_batch(seed=5, n=7, longest=15)))
    fresh = engine.prepare(copy.deepcopy(exact), torch.device("cpu"), torch.float32)
    assert type(engine.engine_of(fresh.lstm)) is engine.Float32Engine
    with torch.inference_mode():
        first, _, _ = model(ids)
        again, _, _ = model(ids)
        other, _, _ = fresh(ids)
    assert torch.equal(first, again) and torch.equal(first, other)


def test_the_plain_engines_stacked_weights_are_made_once_per_version_of_the_weights():
    """Both directions' small weights in one tensor (one batched product per step): made on first use, reused by the
    next calls, made anew when a weight changes (an in-place edit, a new tensor)."""
    from spacy_elmo.bilm.engine.plain import PlainEngine
    from spacy_elmo.bilm.lstm import ProjectedLSTMCell

    plain = PlainEngine(engine.Target(torch.device("cpu"), torch.float32, False))
    cells = [ProjectedLSTMCell(8, 4, 8, None, None) for _ in range(2)]
    first = plain.stacks.get(cells, "projection")
    assert plain.stacks.get(cells, "projection") is first and torch.equal(first[1], cells[1].projection)
    with torch.no_grad():
        cells[1].projection.add_(1.0)
    edited = plain.stacks.get(cells, "projection")
    assert edited is not first and torch.equal(edited[1], cells[1].projection)
    cells[0].projection = torch.nn.Parameter(torch.zeros(4, 8))
    assert torch.equal(plain.stacks.get(cells, "projection")[0], torch.zeros(4, 8))
    assert len(plain.stacks) == 1 and not plain.stacks.get(cells, "state_weight").requires_grad
