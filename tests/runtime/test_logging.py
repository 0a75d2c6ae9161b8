"""The "spacy_elmo" logger: INFO says which model was loaded from where, its precision, and caches turned off;
DEBUG the kernels. The library adds no handler and configures no logger: that is the application's choice."""

import logging
import os
import platform
import shutil
from pathlib import Path

import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.runtime.embedding.cache import DB_NAME


@pytest.fixture()
def model_copy(fixture_dir, tmp_path):
    """A private copy of the fixture, so load_bilm builds (and logs) a new backend instead of reusing the shared one."""
    path = tmp_path / "elmo"
    shutil.copytree(fixture_dir, path)
    return path


def messages(caplog, level):
    return [r.getMessage() for r in caplog.records if r.name.startswith("spacy_elmo") and r.levelno == level]


def test_loading_logs_the_model_where_it_came_from_and_its_precision(model_copy, caplog):
    with caplog.at_level(logging.INFO, logger="spacy_elmo"):
        load_bilm(model_copy)
        load_bilm(model_copy)  # the process cache: nothing new to say
    (loaded,) = messages(caplog, logging.INFO)
    assert f"from {model_copy}" in loaded and "lm_weights.hdf5" in loaded and "precision float32 (exact)" in loaded
    assert not messages(caplog, logging.DEBUG)  # DEBUG is off: the kernels are not even looked at


def test_the_library_configures_no_logging(fixture_dir):
    import subprocess
    import sys

    code = (
        "import logging, sys; from spacy_elmo import load_bilm; load_bilm(sys.argv[1]).embed([['a', 'b']]); "
        "package, root = logging.getLogger('spacy_elmo'), logging.getLogger(); "
        "assert package.handlers == [] and package.level == logging.NOTSET and package.propagate, package; "
        "assert root.handlers == [] and root.level == logging.WARNING, root; print('ok')"
    )
    run = subprocess.run([sys.executable, "-c", code, str(fixture_dir)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def _cpu_flags() -> set[str]:
    """This CPU's flags, read from /proc/cpuinfo here rather than through the package."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def _expected_float32_kernels() -> str:
    """The float32 line as the torch build and the environment decide it: oneDNN's packed products where this
    process chose them, else MKL's packed GEMM where this torch has its ops; SPACY_ELMO_PACKED_WEIGHTS=0: neither."""
    if os.environ.get("SPACY_ELMO_PACKED_WEIGHTS", "1").strip().lower() in ("0", "false", "no", "off"):
        return "kernels: plain engine, torch's cpu kernels, float32"
    from spacy_elmo.bilm.engine import onednn, step_loop

    if onednn.float32_kernels() == "onednn":  # by the CPU's vendor, or forced by SPACY_ELMO_FLOAT32_KERNELS
        return (
            "kernels: onednn-float32 engine, float32 precision, oneDNN pre-packed products of up to 512 rows, "
            f"MKL's GEMM for more, {step_loop.loop_kind()} LSTM time loop"
        )
    has_ops = hasattr(torch.ops.mkl, "_mkl_linear") and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    if has_ops and torch.backends.mkl.is_available():
        return "kernels: mkl-float32 engine, float32 precision, MKL pre-packed GEMM for 3-64-row products"
    return "kernels: mkl-float32 engine, float32 precision, no MKL packs (plain matmul)"


def _expected_int8_kernels() -> str:
    """The int8 kernels this CPU's flags and the kernel caps in the environment call for, without AMX: fbgemm for
    both roles, full-range activations with AVX-512 VNNI, 7-bit ones where products of pairs saturate int16
    (AVX2's ``vpmaddubsw``: no VNNI, or fbgemm capped to AVX2 as CI's second pass does)."""
    flags = _cpu_flags()
    if "amx_int8" in flags or ("avx_vnni" in flags and "avx512_vnni" not in flags):
        pytest.skip("AMX or AVX-VNNI only: oneDNN may serve a role; this check knows the fbgemm CPUs")
    cap = os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").upper()
    vnni = "avx512_vnni" in flags and (not cap or "512" in cap)
    bits = "" if vnni else " (7-bit activations)"
    return f"fast; many rows: fbgemm{bits}, few rows: fbgemm{bits}"


def test_debug_names_the_float32_kernels(model_copy, caplog):
    with caplog.at_level(logging.DEBUG, logger="spacy_elmo"):
        load_bilm(model_copy, dtype="float32")
    assert any("precision float32" in m for m in messages(caplog, logging.INFO))
    kernels = [m for m in messages(caplog, logging.DEBUG) if m.startswith("kernels:")]
    assert kernels == [_expected_float32_kernels()]


def test_debug_names_the_int8_kernels(model_copy, caplog):
    if "fbgemm" not in torch.backends.quantized.supported_engines or platform.machine().lower() not in (
        "x86_64",
        "amd64",
    ):
        pytest.skip("int8 needs fbgemm (x86 torch builds)")
    expected_int8 = _expected_int8_kernels()
    with caplog.at_level(logging.DEBUG, logger="spacy_elmo"):
        load_bilm(model_copy, dtype="int8")
    assert any("precision int8" in m for m in messages(caplog, logging.INFO))
    (kernels,) = [m for m in messages(caplog, logging.DEBUG) if m.startswith("kernels:")]
    prefix = "kernels: int8 engine, int8 products, TorchScript LSTM time loop; this CPU: "
    assert kernels.startswith(prefix), kernels
    assert f"'int8': '{expected_int8}'" in kernels, kernels


def test_caches_turned_off_are_logged(model_copy, tmp_path, caplog, fixture_sentences):
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    (cache_dir / DB_NAME).write_bytes(b"this is not an sqlite database" * 100)
    backend = load_bilm(model_copy, cache_dir=cache_dir)
    with caplog.at_level(logging.INFO, logger="spacy_elmo"):
        backend.configure_cache(cache_mb=0, token_cache_size=0)
        with pytest.warns(RuntimeWarning, match="unusable"):
            backend.embed(fixture_sentences[:1])
        backend.configure_cache(cache_dir=False)
    info = messages(caplog, logging.INFO)
    assert any("in-memory cache turned off" in m for m in info)
    assert any("token-vector cache turned off" in m for m in info)
    assert any(f"disk cache {cache_dir / DB_NAME} turned off" in m for m in info)
