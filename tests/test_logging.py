"""The "spacy_elmo" logger: INFO says which model was loaded from where, its precision, and caches turned off;
DEBUG the kernels. The library adds no handler and configures no logger: that is the application's choice."""

import logging
import shutil

import pytest

from spacy_elmo import load_bilm
from spacy_elmo.cache import DB_NAME


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


@pytest.mark.parametrize("dtype, kernels", [("float32", "MKL"), ("int8", "LSTM time loop")])
def test_debug_names_the_kernels(model_copy, caplog, dtype, kernels):
    from spacy_elmo.bilm import low_precision

    if dtype == "int8" and not low_precision.int8_available():
        pytest.skip("this torch has no int8 engine")
    with caplog.at_level(logging.DEBUG, logger="spacy_elmo"):
        load_bilm(model_copy, dtype=dtype)
    assert any(f"precision {dtype}" in m for m in messages(caplog, logging.INFO))
    debug = " ".join(messages(caplog, logging.DEBUG))
    assert "kernels:" in debug and (kernels in debug or "plain matmul" in debug)


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
