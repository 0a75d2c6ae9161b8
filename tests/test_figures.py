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
