"""Regenerate the README's pictures (needs ``pip install "spacy-elmo[plot]"``).

    python docs/make_figures.py            # writes docs/images/*.png

- ``bank_similarity.png``: ``spacy-elmo similarity`` on the two "bank" sentences, bundled model.
- ``speed_vs_allennlp.png``: the median speed ratios of the current figures in
  ``benchmarks/RESULTS.md`` (the table under "Current figures"), read from that file.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
RIVER, MONEY = "They sat on the bank of the river .", "The bank will approve your loan ."


def bank_figure(path: Path) -> None:
    from spacy_elmo import load_bilm
    from spacy_elmo.similarity import plot, word_similarity

    plot(word_similarity(load_bilm("default"), RIVER, MONEY, "bank"), path)


def current_speed_ratios(results: Path) -> tuple[str, dict[str, dict[str, float]]]:
    """(heading, {weights: {workload: median ratio}}) from the first "Current figures" table of RESULTS.md."""
    text = results.read_text(encoding="utf-8")
    start = text.index("## Current figures")
    heading = text[start:].splitlines()[0].lstrip("# ").strip()
    ratios: dict[str, dict[str, float]] = {}
    for line in text[start:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[\d.]+x", cells[3]):
            ratios.setdefault(cells[0], {})[cells[1]] = float(cells[3][:-1])
    if not ratios:
        raise ValueError(f"no ratio table under '## Current figures' in {results}")
    return heading, ratios


def speed_figure(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heading, ratios = current_speed_ratios(ROOT / "benchmarks" / "RESULTS.md")
    weights: list[str] = list(ratios)
    workloads = list(next(iter(ratios.values())))
    figure, axes = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(workloads)
    for k, workload in enumerate(workloads):
        xs = [i + (k - (len(workloads) - 1) / 2) * width for i in range(len(weights))]
        bars = axes.bar(xs, [ratios[w].get(workload, 0.0) for w in weights], width, label=workload)
        axes.bar_label(bars, fmt="%.1fx", fontsize=8)
    axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    axes.set_xticks(range(len(weights)), [f"{w} weights" for w in weights])
    axes.set_ylabel("speed vs AllenNLP 0.9 ELMo (x, median of 3)")
    axes.set_title("spacy-elmo vs AllenNLP on the same weights, 2-core CPU (higher is faster)", fontsize=10)
    axes.legend(title="workload")
    figure.text(0.01, 0.01, f"benchmarks/RESULTS.md: {heading}", fontsize=7, color="gray")
    figure.tight_layout(rect=(0, 0.03, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> int:
    IMAGES.mkdir(parents=True, exist_ok=True)
    bank_figure(IMAGES / "bank_similarity.png")
    speed_figure(IMAGES / "speed_vs_allennlp.png")
    for name in ("bank_similarity.png", "speed_vs_allennlp.png"):
        print(IMAGES / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
