"""docs/make_figures.py: the README's speed picture is read from benchmarks/RESULTS.md, the bank picture is real."""

from pathlib import Path

import pytest

from tests.conftest import load_docs_script

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_figure_appears_whole_under_savefigs_name(tmp_path, monkeypatch):
    """Figures are written through atomic_path: a path without a suffix gets matplotlib's default format and
    suffix, as ``savefig`` gives it, and a plot that fails while writing leaves no file, not half a one."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from spacy_elmo.similarity import plot_mixes

    mixes = {"ner": ([0.2, 0.3, 0.5], 1.5)}
    plot_mixes(mixes, tmp_path / "mix")
    plot_mixes(mixes, tmp_path / "mix.SVG")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix.SVG", "mix.png"]
    assert (tmp_path / "mix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "mix.SVG").read_bytes()[:1000]

    def half_written(self, path, **kwargs):
        Path(path).write_bytes(b"\x89PNG\r\n")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(OSError, match=r"cannot write .*broken\.png: no space left on device"):
        plot_mixes(mixes, tmp_path / "broken.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix.SVG", "mix.png"]
