"""docs/make_figures.py: the README's speed picture is read from benchmarks/RESULTS.md, the bank picture is real."""

from pathlib import Path

import pytest
from conftest import load_docs_script

ROOT = Path(__file__).resolve().parents[1]


def _module():
    return load_docs_script("make_figures")


def test_speed_ratios_come_from_the_current_results_table():
    heading, ratios = _module().current_speed_ratios(ROOT / "benchmarks" / "RESULTS.md")
    assert heading.startswith("Current figures")
    assert set(ratios) == {"fixture", "small", "original"}
    assert all(set(r) == {"batch 1", "batch 32", "corpus"} and min(r.values()) > 1 for r in ratios.values())


def test_figures_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    module = _module()
    module.speed_figure(tmp_path / "speed.png")
    module.bank_figure(tmp_path / "bank.png")
    for name in ("speed.png", "bank.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 20_000


def test_plotting_changes_no_process_wide_matplotlib_state(tmp_path):
    """The figures are drawn with matplotlib's object API: no backend switch (``matplotlib.use`` is process-wide),
    no pyplot import, nothing left open in pyplot's registry."""
    pytest.importorskip("matplotlib")
    code = (
        "import sys, matplotlib\n"
        "from spacy_elmo import load_bilm\n"
        "from spacy_elmo.similarity import plot, word_similarity\n"
        "raw = lambda: dict.__getitem__(matplotlib.rcParams, 'backend')  # get_backend() itself would import pyplot\n"
        "before = raw()\n"
        "result = word_similarity(load_bilm('default'), 'They sat on the bank .', 'The bank will pay .', 'bank')\n"
        f"plot(result, {str(tmp_path / 'bank.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "assert raw() == before, (before, raw())\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "bank.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
