"""docs/make_figures.py: the README's speed picture is read from benchmarks/RESULTS.md, the bank picture is real."""

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_docs_script

ROOT = Path(__file__).resolve().parents[2]
RIVER_TOKENS = ["They", "sat", "on", "the", "bank", "of", "the", "river", "."]
MONEY_TOKENS = ["The", "bank", "will", "approve", "your", "loan", "."]


def _module():
    return load_docs_script("make_figures")


def test_speed_ratios_come_from_the_current_results_table_one_cpu_at_a_time():
    results = ROOT / "benchmarks" / "RESULTS.md"
    heading, ratios = _module().current_speed_ratios(results)
    cpus = _module().cpu_descriptions(results)
    assert heading.startswith("Current figures")
    assert ratios and set(ratios) <= set(cpus)  # every CPU drawn is described in "The CPUs"
    for table in ratios.values():
        assert set(table) == {"fixture", "small", "original"}
        assert all(set(r) == {"batch 1", "batch 32", "corpus"} and min(r.values()) > 1 for r in table.values())


SPEED_TABLE = """# Benchmark results

## Current figures per CPU

### The CPUs

| name below | CPU | measured |
|---|---|---|
| **Chip A** | Vendor Chip A (family 1, model 2), 2 cores; flags avx2 | 2026-01-01 |
| **Chip B** | Vendor Chip B (family 3), 4 cores | 2026-01-02 |

### Speed vs AllenNLP 0.9.0 (float32, 2 threads)

| weights | workload | CPU | median ratio, 3 runs | details |
|---|---|---|---|---|
| small | batch 1 | Chip A | 2.50x | [x](#x) |
| small | corpus | Chip A | 9.00x | [x](#x) |
| small | batch 1 | Chip B | 3.50x | [x](#x) |
| small | corpus | Chip B | 12.0x | [x](#x) |

### Low precision (2 threads)

| CPU | weights | workload | float32 | x |
|---|---|---|---|---|
| Chip A | small | batch 1 | 1,660 | 4.00x |

## History
"""


def test_each_cpus_ratios_stay_its_own_and_its_panel_names_it(tmp_path, monkeypatch):
    """Two CPUs' rows of one table are two panels, each titled with the CPU the numbers were measured on (as "The
    CPUs" describes it, up to its flags); no other table's ratios leak in."""
    pytest.importorskip("matplotlib")
    module = _module()
    results = tmp_path / "RESULTS.md"
    results.write_text(SPEED_TABLE, encoding="utf-8")
    assert module.current_speed_ratios(results) == (
        "Current figures per CPU",
        {"Chip A": {"small": {"batch 1": 2.5, "corpus": 9.0}}, "Chip B": {"small": {"batch 1": 3.5, "corpus": 12.0}}},
    )
    assert module.cpu_descriptions(results) == {
        "Chip A": "Vendor Chip A (family 1, model 2), 2 cores",
        "Chip B": "Vendor Chip B (family 3), 4 cores",
    }
    monkeypatch.setattr(module, "RESULTS", results)
    figure = _drawn(monkeypatch, lambda: module.speed_figure("x.png"))
    panels = [axes for axes in figure.axes if axes.get_title()]
    assert [axes.get_title() for axes in panels] == [
        "Vendor Chip A\n(family 1, model 2), 2 cores",
        "Vendor Chip B\n(family 3), 4 cores",
    ]
    assert [sorted(label.get_text() for label in axes.texts) for axes in panels] == [
        ["2.5x", "9.0x"],
        ["12.0x", "3.5x"],
    ]


def _drawn(monkeypatch, draw):
    """The matplotlib Figure that ``draw()`` hands to ``save_figure`` (nothing is written)."""
    import spacy_elmo.plots

    figures = []
    monkeypatch.setattr(spacy_elmo.plots, "save_figure", lambda figure, path, dpi=120: figures.append(figure))
    draw()
    (figure,) = figures
    return figure


def test_the_learned_mix_picture_names_its_run_and_model_and_its_axis_starts_at_zero(monkeypatch):
    pytest.importorskip("matplotlib")
    module = _module()
    results = ROOT / "examples" / "project" / "results.md"
    weights, gamma, about = module.learned_mix(results)
    variant, seed = module.MIX_RUN
    row = next(
        line for line in results.read_text(encoding="utf-8").splitlines() if line.startswith(f"| {variant} | {seed} |")
    )
    assert " / ".join(f"{w:.3f}" for w in weights) in row and f"{gamma:.3f}" in row
    assert "SST-5" in about and f"seed {seed}" in about
    assert "ELMo model: default-v1, the small bundled biLM" in about and "spacy-elmo 0.1.0" in about
    figure = _drawn(monkeypatch, lambda: module.mix_figure("x.png"))
    (axes,) = figure.axes
    assert "default-v1" in axes.get_title() and "SST-5" in axes.get_title()
    low, high = axes.get_ylim()
    assert low == 0 and high > max(weights) and "sums to 1" in axes.get_ylabel()
    assert sorted(text.get_text() for text in axes.texts) == sorted(f"{w:.3f}" for w in weights)


def test_the_architecture_picture_shows_the_front_ends_around_the_one_backend(monkeypatch):
    pytest.importorskip("matplotlib")
    figure = _drawn(monkeypatch, lambda: _module().architecture_figure("x.png"))
    texts = " ".join(text.get_text() for axes in figure.axes for text in axes.texts)
    for piece in ("the elmo component", "ElmoVectorizer", "shared backend", "the listener", "model files", "biLM"):
        assert piece in texts, piece
    assert "](images/architecture.png)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")


def test_the_bank_picture_has_no_gap_between_its_panels(monkeypatch):
    """The heatmap fills its panel (its cells need not be square), so the bars and the heatmap sit side by side."""
    pytest.importorskip("matplotlib")
    from spacy_elmo.similarity import WordSimilarity, plot

    a, b = RIVER_TOKENS, MONEY_TOKENS
    layers = [("layer 0 (char CNN, context-free)", 1.0), ("layer 1 (LSTM 1)", 0.8), ("mix (equal weights)", 0.9)]
    result = WordSimilarity("bank", (a, b), (4, 1), layers, np.linspace(-0.1, 1, len(a) * len(b)).reshape(len(a), -1))
    figure = _drawn(monkeypatch, lambda: plot(result, "x.png"))
    bars, heat = figure.axes[:2]
    for axes in (bars, heat):
        axes.apply_aspect()
    assert heat.get_position().x0 - bars.get_position().x1 < 0.12  # room for the heatmap's token labels only


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

    from spacy_elmo.plots import plot_mixes

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
