"""Regenerate the guide's pictures (needs ``pip install "spacy-elmo[plot]"``; no network, no training).

    python docs/make_figures.py                 # writes every docs/images/*.png
    python docs/make_figures.py speed mix       # only the ones named (bank, speed, mix, architecture)

- ``bank_similarity.png``: ``spacy-elmo similarity`` on the two "bank" sentences, bundled model.
- ``speed_vs_allennlp.png``: the median speed ratios of the current figures in ``benchmarks/RESULTS.md`` (the
  "Speed vs AllenNLP" table under "Current figures per CPU"), one panel per CPU named as "The CPUs" names it.
- ``learned_mix.png``: the layer mix ``textcat`` learned on SST-5 in ``examples/project/results.md`` (frozen ELMo,
  seed 1), drawn as ``spacy-elmo plot-mix`` draws a trained pipeline's, the biLM and run named from that file.
- ``architecture.png``: how the pieces fit (the front ends, the shared backend, the biLM and its files).

Every number drawn is read from the file named; the figures are drawn with matplotlib's object API.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from spacy_elmo.runtime.configuration.defaults import DEFAULT_MAX_LENGTH

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PROJECT_RESULTS = ROOT / "examples" / "project" / "results.md"
RIVER, MONEY = "They sat on the bank of the river .", "The bank will approve your loan ."
SPEED_SECTION = "### Speed vs AllenNLP"  # the table speed_figure draws, under "## Current figures per CPU"
MIX_RUN = ("sst5_elmo", "1")  # the row of the SST-5 table learned_mix.png draws: frozen ELMo, seed 1

Ratios = dict[str, dict[str, dict[str, float]]]  # CPU -> weights -> workload -> median ratio


def bank_figure(path: Path) -> None:
    from spacy_elmo import load_bilm
    from spacy_elmo.similarity import plot, word_similarity

    plot(word_similarity(load_bilm("default"), RIVER, MONEY, "bank"), path)


def _table_rows(lines: list[str]) -> list[dict[str, str]]:
    """The first Markdown table in ``lines`` as dicts keyed by its header cells (stops at its end)."""
    rows: list[dict[str, str]] = []
    header: list[str] = []
    for line in lines:
        if not line.startswith("|"):
            if header:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not header:
            header = cells
        elif not set("".join(cells)) <= set("-: "):  # not the |---| line
            rows.append(dict(zip(header, cells)))
    return rows


def _section(text: str, heading: str) -> list[str]:
    """The lines under the first heading that starts with ``heading``, up to the next heading of its level."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(heading)), None)
    if start is None:
        raise ValueError(f"no heading '{heading}...'")
    level = heading.split(" ")[0] + " "
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(level)), len(lines))
    return lines[start:end]


def current_speed_ratios(results: Path) -> tuple[str, Ratios]:
    """(heading, {CPU: {weights: {workload: median ratio}}}) from the "Speed vs AllenNLP" table under "Current
    figures" in RESULTS.md: its columns read by name, each CPU's rows kept apart."""
    text = results.read_text(encoding="utf-8")
    heading = _section(text, "## Current figures")[0].lstrip("# ").strip()
    ratios: Ratios = {}
    for row in _table_rows(_section(text, SPEED_SECTION)):
        median = next(value for name, value in row.items() if name.startswith("median ratio"))
        if re.fullmatch(r"[\d.]+x", median):
            ratios.setdefault(row["CPU"], {}).setdefault(row["weights"], {})[row["workload"]] = float(median[:-1])
    if not ratios:
        raise ValueError(f"no ratio table under '{SPEED_SECTION}' in {results}")
    return heading, ratios


def cpu_descriptions(results: Path) -> dict[str, str]:
    """{name: CPU} from RESULTS.md's "The CPUs" table, each CPU as its cell says it up to the flags (``; flags``)."""
    rows = _table_rows(_section(results.read_text(encoding="utf-8"), "### The CPUs"))
    return {row["name below"].strip("*"): row["CPU"].split(";")[0].strip() for row in rows}


def speed_figure(path: Path) -> None:
    from spacy_elmo.plots import new_figure, save_figure

    heading, ratios = current_speed_ratios(RESULTS)
    cpus = cpu_descriptions(RESULTS)
    figure, panels = new_figure(nrows=1, ncols=len(ratios), figsize=(5 * len(ratios), 4.2), sharey=True, squeeze=False)
    for axes, (cpu, table) in zip(panels[0], ratios.items()):
        weights = list(table)
        workloads = list(next(iter(table.values())))
        width = 0.8 / len(workloads)
        for k, workload in enumerate(workloads):
            xs = [i + (k - (len(workloads) - 1) / 2) * width for i in range(len(weights))]
            bars = axes.bar(xs, [table[w].get(workload, 0.0) for w in weights], width, label=workload)
            axes.bar_label(bars, fmt="%.1fx", fontsize=7)
        axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axes.set_xticks(range(len(weights)), [f"{w} weights" for w in weights], fontsize=9)
        axes.set_title(cpus.get(cpu, cpu).replace(" (", "\n(", 1), fontsize=9)  # the model, then family and cores
    panels[0][0].set_ylabel("speed vs AllenNLP 0.9's ELMo (x)")
    panels[0][-1].legend(title="workload", fontsize=8, title_fontsize=8, loc="upper right")
    figure.suptitle(
        "spacy-elmo vs AllenNLP on the same weights: float32, 2 threads, median of 3 runs (higher is faster)",
        fontsize=10,
    )
    figure.text(0.01, 0.01, f"benchmarks/RESULTS.md: {heading}, {SPEED_SECTION[4:]}", fontsize=7, color="gray")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
    save_figure(figure, path, dpi=100)


def learned_mix(results: Path) -> tuple[list[float], float, str]:
    """(layer weights, gamma, what was trained on which biLM) of ``MIX_RUN`` in the project's results.md."""
    text = results.read_text(encoding="utf-8")
    variant, seed = MIX_RUN
    rows = _table_rows(_section(text, "## SST-5"))
    row = next(r for r in rows if r["variant"] == variant and r["seed"] == seed)
    weights = [float(w) for w in row["layer weights (0 / 1 / 2)"].split("/")]
    written = re.search(r"on (\d{4}-\d\d-\d\d): .*?spacy-elmo ([\d.]+)", text)
    model = re.search(r"ELMo model: ([^.]+)\.", text)
    steps = re.search(r"--training\.max_steps (\d+)", text)
    if not (written and model and steps):
        raise ValueError(f"{results}: no date, spacy-elmo version, ELMo model or max_steps line")
    version = written.group(2)
    name = _bundled_name(version)
    about = (
        f"textcat on SST-5 (examples/project, {written.group(1)}, seed {seed}, {steps.group(1)} steps)\n"
        f"ELMo model: {name + ', ' if name else ''}{model.group(1)} of spacy-elmo {version}"
    )
    return weights, float(row["gamma"]), about


def _bundled_name(version: str) -> str:
    """The bundled version name ("default-v1") of the default a spacy-elmo older than 0.2.0 bundled; '' from 0.2.0 on
    (its "default" moved to default-v2 during that version: the version alone does not say which)."""
    from spacy_elmo.sources.bundled_versions import UNRECORDED_VERSION

    return UNRECORDED_VERSION if tuple(int(p) for p in version.split(".")) < (0, 2, 0) else ""


def mix_figure(path: Path) -> None:
    from spacy_elmo.plots import plot_mixes

    weights, gamma, about = learned_mix(PROJECT_RESULTS)
    plot_mixes({"textcat": (weights, gamma)}, path, title=f"Layer weights learned by {about}")


# the architecture picture: name -> (x, y, width, height, colour, title, lines), in a 10 x 6.5 frame: the spaCy
# side left, the scikit-learn side and the other front ends right, the shared backend between them, the biLM below
_BOXES: dict[str, tuple[float, float, float, float, str, str, str]] = {
    "listener": (
        0.1,
        4.9,
        3.0,
        1.4,
        "#fde2c4",
        "spacy train: the listener",
        "ElmoScalarMix.v2 in textcat / ner\nlearns the layer weights and gamma\n(spacy/mix_layer.py)",
    ),
    "component": (
        0.1,
        2.65,
        3.0,
        1.4,
        "#cfe3f7",
        "spaCy: the elmo component",
        "nlp(text) -> doc._.elmo_layers,\ndoc.tensor, .vector, .similarity\n(spacy/pipeline_component.py)",
    ),
    "files": (
        0.1,
        0.2,
        3.0,
        1.4,
        "#fff5c8",
        "model files (sources/)",
        'the bundled default (no download),\n"original" and published names, a folder:\n'
        "options.json + weights, or an ONNX export",
    ),
    "backend": (
        3.75,
        2.65,
        2.5,
        3.65,
        "#f3f3f3",
        "shared backend (runtime/)",
        "load_bilm(model)\n-> ElmoBackend: one per\nmodel, device and precision\nin a process\n\n"
        f"windows of <= {DEFAULT_MAX_LENGTH} tokens,\nmemory + disk caches,\nlength batches",
    ),
    "bilm": (
        3.75,
        0.2,
        2.5,
        1.4,
        "#fbe3e3",
        "the biLM (bilm/, onnx/)",
        "char CNN -> biLSTM; on torch,\none engine per device and\nprecision; or ONNX Runtime",
    ),
    "cli": (
        6.9,
        4.9,
        3.0,
        1.4,
        "#e8e0f3",
        "command line (cli/)",
        "spacy-elmo embed -> HDF5 files\n(output/; a Dask cluster with\n--scheduler), spacy-elmo similarity",
    ),
    "vectorizer": (
        6.9,
        2.65,
        3.0,
        1.4,
        "#d5efd5",
        "scikit-learn: ElmoVectorizer",
        "texts, token lists or Docs ->\none pooled row each (sklearn.py);\nDask per partition (dask.py)",
    ),
    "compat": (
        6.9,
        0.2,
        3.0,
        1.4,
        "#e8e0f3",
        "drop-in APIs (compat/)",
        "AllenNLP's Elmo on the biLM itself;\nELMoForManyLangs' and simple_elmo's\nembedders through the backend",
    ),
}
# (from, to, label): horizontal where the boxes share a row, vertical where they share a column, else edge to edge
_ARROWS = [
    ("component", "backend", "sentences"),
    ("component", "listener", "stored layers"),
    ("vectorizer", "backend", "tokens"),
    ("cli", "backend", "sentences"),
    ("compat", "backend", ""),
    ("compat", "bilm", "Elmo"),
    ("files", "bilm", "weights"),
    ("backend", "bilm", "batches"),
]


def _ends(start: tuple[float, ...], end: tuple[float, ...]) -> tuple[tuple[float, float], tuple[float, float]]:
    """An arrow's tail and head on the facing edges of two boxes: level where their heights overlap, plumb where
    their widths do, else from corner to corner."""
    (x0, y0, w0, h0), (x1, y1, w1, h1) = start[:4], end[:4]
    low, high = max(y0, y1), min(y0 + h0, y1 + h1)
    if low < high and (x0 + w0 <= x1 or x1 + w1 <= x0):  # side by side
        y = (low + high) / 2
        return ((x0 + w0, y), (x1, y)) if x0 < x1 else ((x0, y), (x1 + w1, y))
    left, right = max(x0, x1), min(x0 + w0, x1 + w1)
    if left < right:  # one above the other
        x = (left + right) / 2
        return ((x, y0), (x, y1 + h1)) if y0 > y1 else ((x, y0 + h0), (x, y1))
    tail = (x0 if x0 > x1 else x0 + w0, y0 + h0 if y0 < y1 else y0)
    head = (x1 + w1 if x0 > x1 else x1, y1 if y0 < y1 else y1 + h1)
    return tail, head


def architecture_figure(path: Path) -> None:
    from matplotlib.patches import FancyBboxPatch

    from spacy_elmo.plots import new_figure, save_figure

    figure, axes = new_figure(figsize=(10, 6.5))
    axes.set_xlim(0, 10)
    axes.set_ylim(0, 6.5)
    axes.axis("off")
    for x, y, w, h, colour, title, lines in _BOXES.values():
        axes.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.1", fc=colour, ec="0.33"))
        axes.text(x + w / 2, y + h - 0.15, title, ha="center", va="top", fontsize=10, weight="bold")
        axes.text(x + w / 2, (y + h - 0.45 + y) / 2, lines, ha="center", va="center", fontsize=8.5, linespacing=1.3)
    for start, end, label in _ARROWS:
        tail, head = _ends(_BOXES[start], _BOXES[end])
        axes.annotate(
            "", head, tail, arrowprops={"arrowstyle": "-|>", "color": "0.2", "lw": 1.3, "shrinkA": 1, "shrinkB": 1}
        )
        if label:
            level = tail[1] == head[1]
            x, y = (tail[0] + head[0]) / 2, (tail[1] + head[1]) / 2
            axes.text(
                x + (0 if level else 0.08),
                y + (0.1 if level else 0),
                label,
                fontsize=7.5,
                color="0.2",
                ha="center" if level else "left",
                va="bottom" if level else "center",
            )
    figure.subplots_adjust(left=0.005, right=0.995, top=0.995, bottom=0.005)
    save_figure(figure, path, dpi=100)


FIGURES: dict[str, tuple[str, Any]] = {
    "bank": ("bank_similarity.png", bank_figure),
    "speed": ("speed_vs_allennlp.png", speed_figure),
    "mix": ("learned_mix.png", mix_figure),
    "architecture": ("architecture.png", architecture_figure),
}


def _to_palette(path: Path) -> None:
    """Rewrite a PNG with a palette of 256 colours (a third of its size or less; flat plots lose nothing visible)."""
    from PIL import Image

    from spacy_elmo.groundwork.atomic_write import atomic_path

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(256)
    with atomic_path(path) as tmp:
        small.save(tmp, format="PNG", optimize=True)


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        print(f"unknown figure {', '.join(unknown)}: choose from {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name in names or list(FIGURES):
        file, draw = FIGURES[name]
        draw(IMAGES / file)
        _to_palette(IMAGES / file)
        print(IMAGES / file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
