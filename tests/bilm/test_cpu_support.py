"""Precision on every x86 CPU: what this CPU runs natively (spacy_elmo.bilm.cpu_support), and the kernels each engine
family chooses by what this CPU's kernels do (int8's per role, float32's oneDNN or MKL).

The kernels of a CPU without VNNI (AVX2-only: AMD Zen 2/3, older Intel) are exercised on any CI machine
in two ways: in a child process whose environment caps oneDNN, fbgemm and ATen to AVX2 (as CI's second
pass does for the whole suite), and in-process by forcing the choice those CPUs get (7-bit activations).
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import BiLM, cpu_support
from spacy_elmo.bilm.engine import int8, onednn, registry
from spacy_elmo.bilm.engine.int8 import prepack, quantize_weight, released_packs
from spacy_elmo.bilm.engine.precisions import auto_precision
from spacy_elmo.bilm.weights import load_model
from spacy_elmo.runtime.embedding.backend import ElmoBackend, resolve_dtype
from spacy_elmo.train import build_options
from tests.bilm.test_precision import TOLERANCE, layer_errors, needs_int8

AVX2_CAPS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


@pytest.fixture
def fresh_kernels(monkeypatch):
    """Probe the int8 kernels afresh for the test, and again after it."""
    int8.int8_kernels.cache_clear()
    yield
    int8.int8_kernels.cache_clear()


def saturating_product(engine: str, reduce_range: bool, rows: int) -> float:
    """Relative error of a product whose exact value is known (256): all-ones activations by all-ones weights."""
    q, scale = quantize_weight(torch.ones(32, 256))
    out = torch.ops.quantized.linear_dynamic(torch.ones(rows, 256), prepack(q, scale, engine), reduce_range)
    return float((out - 256.0).abs().max() / 256.0)


@needs_int8
@pytest.mark.parametrize("rows", [1, 4, 64])
def test_chosen_int8_kernels_do_not_saturate(rows):
    """Whatever this CPU is, the chosen kernel of each role computes a product that saturates int16 pair sums
    exactly."""
    kernels = int8.int8_kernels()
    for kernel in (kernels.many_rows, kernels.few_rows):
        assert saturating_product(kernel.engine, kernel.reduce_range, rows) < 1e-3
        if kernel.reduce_range:  # 7 bits only where 8 would be wrong: a VNNI CPU keeps full range
            assert not int8._saturation_free(kernel.engine)


@needs_int8
def test_seven_bit_activations_stay_within_the_bound(fixture_dir, sentences, fresh_kernels, monkeypatch):
    """The choice an AVX2-only CPU gets (both roles with reduce_range) on this machine: still within the int8 bound."""
    monkeypatch.setattr(int8, "_saturation_free", lambda engine: False)
    kernels = int8.int8_kernels()
    assert kernels.many_rows.reduce_range and kernels.few_rows.reduce_range
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    low = ElmoBackend(
        model, fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", torch.device("cpu"), torch.int8
    )
    packs = [pack for module in low.model.modules() for pack in released_packs(module).values()]
    assert packs and all(p.reduce_range for p in packs)
    errors = layer_errors(low.embed(sentences), load_bilm(fixture_dir).embed(sentences))
    assert (errors > 0).all() and (errors < TOLERANCE["int8"]).all()


@needs_int8
def test_full_range_where_the_kernels_saturate_would_be_wrong(fresh_kernels, monkeypatch):
    """Why the probe matters: forcing full range onto kernels that saturate breaks the bound by far (skipped on VNNI
    CPUs)."""
    engine = int8.int8_kernels().many_rows.engine
    if saturating_product(engine, False, 8) < 1e-3:
        pytest.skip(
            "this CPU's int8 kernels sum in int32 (VNNI/AMX): nothing saturates; see the AVX2 child-process test"
        )
    assert int8._saturation_free(engine) is False
    int8.int8_kernels.cache_clear()
    assert int8.int8_kernels().many_rows.reduce_range


AVX2_CHILD = r"""
import json, sys, warnings
import numpy as np, torch
from spacy_elmo import load_bilm
from spacy_elmo.runtime.embedding.backend import ElmoBackend
from spacy_elmo.bilm import cpu_support
from spacy_elmo.bilm.engine import int8
from spacy_elmo.bilm.weights import load_model
fixture = sys.argv[1]
sentences = [s.split() for group in json.load(open(fixture + "/sentences.json")) for s in group]
exact = load_bilm(fixture).embed(sentences)
def errors(low):
    worst = np.max([np.abs(a - b).max(axis=(1, 2)) for a, b in zip(low, exact)], axis=0)
    return (worst / np.max([np.abs(b).max(axis=(1, 2)) for b in exact], axis=0)).tolist()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    bf16 = load_bilm(fixture, precision="bfloat16")
    again = ElmoBackend(load_model(bf16.options_path, bf16.weights_path), bf16.options_path, bf16.weights_path,
                        torch.device("cpu"), torch.bfloat16)
kernels = int8.int8_kernels()
print(json.dumps({
    "capability": cpu_support.aten_capability(), "bf16_native": cpu_support.bf16_native(),
    "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    "kernels": [[k.engine, k.reduce_range] for k in (kernels.many_rows, kernels.few_rows)],
    "saturating": {e: not int8._saturation_free(e) for e in int8.int8_engines()},
    "auto": str(load_bilm(fixture, precision="auto").dtype),
    "int8": errors(load_bilm(fixture, precision="int8").embed(sentences)), "bf16": errors(bf16.embed(sentences)),
}))
"""


@needs_int8
def test_avx2_only_kernels_in_a_child_process(fixture_dir):
    """With oneDNN, fbgemm and ATen capped to AVX2 (the kernels of a CPU without AVX-512/VNNI): bf16 warns once with
    the alternative and stays correct, int8 takes 7-bit activations wherever its kernels saturate, and both stay
    within their bounds on the fixture's sentences; "auto" is float32 (no low precision holds on every input)."""
    env = {**os.environ, **AVX2_CAPS, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", AVX2_CHILD, str(fixture_dir)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["capability"] == "AVX2" and report["bf16_native"] is False
    slow = [message for category, message in report["warnings"] if category == "SlowPrecisionWarning"]
    assert len(slow) == 1 and "bfloat16" in slow[0] and "int8" in slow[0] and "ONEDNN_MAX_CPU_ISA=AVX2" in slow[0]
    for engine, reduce_range in report["kernels"]:
        assert reduce_range == report["saturating"][engine]
    assert report["auto"] == "torch.float32"
    assert max(report["int8"]) < TOLERANCE["int8"] and max(report["bf16"]) < TOLERANCE["bfloat16"]


def test_slow_precision_warns_once_naming_what_to_pick(fixture_dir, monkeypatch):
    monkeypatch.setattr(registry, "_warned", {})
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: False)
    files = (fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    with pytest.warns(
        cpu_support.SlowPrecisionWarning, match=r"bfloat16.*emulated.*precision='int8'.*'float32'.*'auto'"
    ):
        ElmoBackend(load_model(*files), *files, torch.device("cpu"), torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ElmoBackend(load_model(*files), *files, torch.device("cpu"), torch.bfloat16)  # once per process
        ElmoBackend(load_model(*files), *files, torch.device("cpu"), torch.float32)  # float32 never warns
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: True)
    assert registry.slow_precision_reason(torch.bfloat16, torch.device("cpu")) is None
    assert registry.slow_precision_reason(torch.bfloat16, torch.device("cuda")) is None  # CPU kernels only


def test_auto_never_picks_a_precision_that_can_be_silently_wrong(fixture_dir, monkeypatch):
    """No low precision holds its bound on every input of a trained model (tests/bilm/test_engines.py's property test,
    docs/precision.md), so "auto" is float32 on every device and CPU, fast int8 kernels or not."""
    for fast in (True, False):
        monkeypatch.setattr(cpu_support, "vector_kernels", lambda fast=fast: fast)
        assert resolve_dtype("auto") is torch.float32
        assert auto_precision("cuda") == "float32"
    auto = load_bilm(fixture_dir, precision="auto")
    assert auto is load_bilm(fixture_dir) and auto.dtype is torch.float32
    assert registry.summary()["auto (cpu)"] == "float32"
    with pytest.raises(ValueError, match=r"precision must be one of.*'auto'"):
        resolve_dtype("fastest")


@needs_int8
def test_auto_in_every_front_end(fixture_dir, tmp_path):
    import h5py
    import spacy
    from typer.testing import CliRunner

    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.cli import app

    chosen = resolve_dtype("auto")
    name = str(chosen).replace("torch.", "")
    nlp = spacy.blank("en")
    component = nlp.add_pipe("elmo", config={"model": str(fixture_dir), "precision": "auto"})
    assert component.backend.dtype is chosen and nlp.config["components"]["elmo"]["precision"] == "auto"
    doc = nlp("The bank approved the loan .")
    nlp.to_disk(tmp_path / "pipeline")
    again = spacy.load(tmp_path / "pipeline")  # saved with the files' identity: "auto" may pick again elsewhere
    loaded = again.get_pipe("elmo").backend  # the pipeline's own copy of the files
    assert loaded.dtype is chosen and loaded.fingerprint == component.backend.fingerprint
    assert doc._.elmo_model == component.backend.fingerprint

    vectorizer = ElmoVectorizer(model=str(fixture_dir), precision="auto", tokenizer=str.split).fit([["A", "bank"]])
    assert vectorizer.precision == "auto" and vectorizer.precision_ == name
    assert vectorizer.model_fingerprint_ == load_bilm(fixture_dir, precision=chosen).fingerprint

    text = tmp_path / "in.txt"
    text.write_text("The bank approved the loan .\n", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        ["embed", str(text), str(tmp_path / "o.hdf5"), "-m", str(fixture_dir), "--precision", "auto", "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    with h5py.File(tmp_path / "o.hdf5", "r") as f:
        np.testing.assert_array_equal(
            f["0"][...], load_bilm(fixture_dir, precision=chosen).embed([text.read_text().split()])[0]
        )


def test_a_pipeline_saved_in_another_precision_still_checks_its_files(fixture_dir, tmp_path):
    """The saved identity is the files' (dtype-free): a pipeline saved in int8 loads as float32, swapped files do
    not."""
    import shutil

    import spacy

    from spacy_elmo.bilm.weights import WeightFileError

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(fixture_dir), "precision": "float32"})
    nlp.to_disk(tmp_path / "p")
    config = json.loads(json.dumps(spacy.util.load_config(tmp_path / "p" / "config.cfg").interpolate()))
    assert config["components"]["elmo"]["precision"] == "float32"
    model_json = next((tmp_path / "p").glob("elmo/**/model.json"))
    saved = json.loads(model_json.read_text())
    assert saved["files_fingerprint"] == load_bilm(fixture_dir).files_fingerprint
    weights = next(model_json.parent.glob("*.hdf5"))
    other = tmp_path / "other.hdf5"
    shutil.copy(weights, other)
    import h5py

    with h5py.File(other, "r+") as f:  # a different model in the same place
        first = next(name for name in _datasets(f) if f[name].size > 1)
        f[first][...] = f[first][...] * 0.5
    shutil.copy(other, weights)
    with pytest.raises(WeightFileError, match="fingerprint"):
        spacy.load(tmp_path / "p")


def _datasets(group, prefix=""):
    import h5py

    for key, item in group.items():
        if isinstance(item, h5py.Dataset):
            yield prefix + key
        else:
            yield from _datasets(item, prefix + key + "/")


@needs_int8
@pytest.mark.slow
def test_original_architecture_within_the_int8_bound(tmp_path):
    """The published "original" architecture (93.6M parameters, random weights at bilm-tf's init scale) in int8 on
    this CPU's kernels (CI's second pass: AVX2's), every layer within the bound; its float32 weights are released."""
    from spacy_elmo.bilm.weights import save_model

    torch.manual_seed(0)
    model = BiLM(build_options("original"))  # the preset train --arch original builds
    with torch.no_grad():
        model.token_encoder.char_embed.weight.normal_(0, 1).mul_(0.5)
        for highway in model.token_encoder.highways:
            highway.carry.bias.fill_(-2.0)
    directory = save_model(model, tmp_path / "original")
    del model
    sentences = [
        s.split()
        for s in (
            "The bank approved the loan on Tuesday .",
            "They sat on the river bank .",
            "A quick brown fox jumps over the lazy dog near the old mill .",
        )
    ]
    exact = load_bilm(directory).embed(sentences)
    int8 = load_bilm(directory, precision="int8")
    errors = layer_errors(int8.embed(sentences), exact)
    print("original int8", errors, registry.summary())
    assert (errors > 0).all() and (errors < TOLERANCE["int8"]).all()
    kept = sum(p.numel() for p in int8.model.parameters() if not p.is_meta)
    assert kept < 0.01 * sum(p.numel() for p in int8.model.parameters())  # no float32 copy of the big matrices


@pytest.fixture(scope="module")
def sentences(fixture_dir):
    groups = json.loads((Path(fixture_dir) / "sentences.json").read_text())
    return [s.split() for group in groups for s in group]


@pytest.fixture
def fresh_float32_choice(monkeypatch):
    """Decide the float32 kernels afresh for the test, and again after it."""
    onednn.float32_kernels.cache_clear()
    yield
    onednn.float32_kernels.cache_clear()


def test_float32_kernels_forced_by_the_environment(fresh_float32_choice, monkeypatch):
    """SPACY_ELMO_FLOAT32_KERNELS=mkl|onednn decides whatever the CPU's vendor; the float32 target gets that engine;
    any other value is refused in one line naming the variable and its values."""
    from spacy_elmo.bilm import engine

    monkeypatch.setattr(cpu_support, "cpu_vendor", lambda: pytest.fail("forced: the vendor is not asked"))
    target = engine.Target(torch.device("cpu"), torch.float32, False)
    expected = {"mkl": engine.MklEngine, "onednn": engine.Float32Engine}
    for value in ("mkl", "onednn", " ONEDNN "):
        monkeypatch.setenv("SPACY_ELMO_FLOAT32_KERNELS", value)
        onednn.float32_kernels.cache_clear()
        choice = onednn.float32_kernels()
        if value.strip().lower() == "onednn" and not onednn.onednn_float32_available():
            assert choice == "mkl"  # no exact oneDNN float32 here: MKL's, whatever was forced
            continue
        assert choice == value.strip().lower() and registry.choose(target) is expected[choice]
    monkeypatch.setenv("SPACY_ELMO_FLOAT32_KERNELS", "fast")
    onednn.float32_kernels.cache_clear()
    with pytest.raises(ValueError, match="SPACY_ELMO_FLOAT32_KERNELS='fast' is not one of onednn, mkl, auto"):
        onednn.float32_kernels()


def test_float32_kernels_auto_follows_the_cpu_vendor_once(fresh_float32_choice, monkeypatch):
    """auto: oneDNN's kernels on AMD CPUs (where they were measured faster than MKL's), MKL's on Intel and on a CPU
    that names no vendor; asked once per process (every later ask is the cached answer)."""
    if not onednn.onednn_float32_available():
        pytest.skip("this torch has no exact oneDNN float32 products")
    monkeypatch.setenv("SPACY_ELMO_FLOAT32_KERNELS", "auto")
    asked = []
    for vendor, expected in (("AuthenticAMD", "onednn"), ("GenuineIntel", "mkl"), ("", "mkl")):

        def named(vendor=vendor):
            asked.append(vendor)
            return vendor

        monkeypatch.setattr(cpu_support, "cpu_vendor", named)
        onednn.float32_kernels.cache_clear()
        assert [onednn.float32_kernels() for _ in range(3)] == [expected] * 3
    assert asked == ["AuthenticAMD", "GenuineIntel", ""]


def test_float32_kernels_need_exact_onednn_products(fresh_float32_choice, monkeypatch):
    """An AMD CPU whose torch has no exact oneDNN float32 products keeps MKL's."""
    monkeypatch.setenv("SPACY_ELMO_FLOAT32_KERNELS", "auto")
    monkeypatch.setattr(cpu_support, "cpu_vendor", lambda: "AuthenticAMD")
    monkeypatch.setattr(onednn, "onednn_float32_available", lambda: False)
    assert onednn.float32_kernels() == "mkl"


def test_cpu_vendor_is_what_the_machine_reports():
    """The vendor is /proc/cpuinfo's vendor_id where Linux has one (x86), and info shows it."""
    try:
        lines = Path("/proc/cpuinfo").read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    reported = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("vendor_id")), None)
    if reported is not None:
        assert cpu_support.cpu_vendor() == reported
    assert registry.summary()["cpu vendor"] == (cpu_support.cpu_vendor() or "unknown")
    assert registry.summary()["float32 kernels"] in ("onednn", "mkl")
