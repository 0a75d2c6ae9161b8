"""The package's figures, all drawn here: ``spacy-elmo similarity --plot``'s per-layer bars and token heatmap
(:func:`plot_word_similarity`) and ``spacy-elmo plot-mix``'s learned layer weights (:func:`plot_mixes`), with
what drawing them needs (matplotlib checked, a figure's file and format, the figure written whole).

Importing this module imports no matplotlib (the ``[plot]`` extra): the command line checks that figures can be drawn
(:func:`check_plotting`, :func:`figure_file`) before it loads a model or a pipeline.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .about import install_extra
from .groundwork.atomic_write import atomic_path
from .groundwork.excerpt import excerpt
from .groundwork.file_names import PathLike

__all__ = ["check_plotting", "figure_file", "new_figure", "plot_mixes", "plot_word_similarity", "save_figure"]


def check_plotting() -> None:
    """An ImportError naming the extra to install unless matplotlib's parts the figures use import (say it before
    a model loads or a pipeline is read, not after)."""
    try:
        import matplotlib.figure
        import matplotlib.patches  # noqa: F401
    except ImportError:
        raise ImportError(f"plots need matplotlib: {install_extra('plot')}") from None


def figure_file(path: PathLike) -> tuple[Path, str]:
    """The file a figure for ``path`` is written to and its format, as ``savefig`` chooses them: the suffix's format,
    else matplotlib's default (``savefig.format``) with that suffix added (``bank`` -> ``bank.png``). A ValueError
    naming the formats matplotlib writes when the suffix is none of them, an ImportError naming the extra when
    matplotlib is missing: said before a model loads, not after it ran."""
    check_plotting()
    import matplotlib
    from matplotlib.backend_bases import FigureCanvasBase

    name = os.fspath(path)
    fmt = os.path.splitext(name)[1][1:].lower()
    if not fmt:
        fmt = str(matplotlib.rcParams["savefig.format"])
        name = name.rstrip(".") + "." + fmt
    known = sorted(FigureCanvasBase.get_supported_filetypes())
    if fmt not in known:
        raise ValueError(
            f"cannot write the figure {excerpt(name)}: matplotlib writes no {excerpt(fmt)} format; end the file name "
            f"with one of .{', .'.join(known)} (e.g. .png)"
        )
    return Path(name), fmt


def new_figure(**subplots: Any) -> tuple[Any, Any]:
    """A matplotlib ``Figure`` and its axes (``subplots`` as ``Figure.subplots`` takes them), or an ImportError
    saying which extra to install.

    Built with the object API, not pyplot: no backend is switched (``matplotlib.use`` is process-wide and would
    change the user's own plotting), no window opens, and nothing is left in pyplot's figure registry.
    """
    check_plotting()
    from matplotlib.figure import Figure

    figsize = subplots.pop("figsize", None)
    figure = Figure(figsize=figsize)
    return figure, figure.subplots(**subplots)


def plot_word_similarity(
    word: str,
    layers: Sequence[tuple[str, float]],
    sentences: tuple[Sequence[str], Sequence[str]],
    positions: tuple[int, int],
    token_matrix: np.ndarray,
    path: PathLike,
) -> Path:
    """The figure of :func:`spacy_elmo.similarity.plot`: bars of ``word``'s cosine per layer (``layers``: label and
    cosine, the mix last) beside the heatmap of ``token_matrix``, the two ``sentences``' token-by-token cosines,
    ``word``'s cell (at ``positions``) outlined. Returns the file written (:func:`figure_file`)."""
    check_plotting()
    from matplotlib.patches import Rectangle

    (a, b), (i, j) = sentences, positions
    # the heatmap's cells take the room its panel has (aspect "auto"), so no gap opens beside a short sentence pair
    figure, (bars, heat) = new_figure(nrows=1, ncols=2, figsize=(10, 4.4), gridspec_kw={"width_ratios": [1, 1.25]})
    labels = [label.split(" (")[0] if not label.startswith("mix") else "mix" for label, _ in layers]
    values = [cosine for _, cosine in layers]
    shown = bars.bar(labels, values, color=["#9e9e9e"] + ["#1f77b4"] * (len(values) - 2) + ["#d62728"])
    bars.bar_label(shown, fmt="%.2f")
    bars.set_ylim(min(0.0, min(values)) - 0.05, 1.1)
    bars.set_ylabel("cosine similarity")
    bars.set_title(f"{word!r} in A vs B, per layer")
    low = min(0.0, float(token_matrix.min()))
    image = heat.imshow(token_matrix, cmap="viridis", vmin=low, vmax=1.0, aspect="auto")
    heat.set_xticks(range(len(b)), b, rotation=60, ha="right")
    heat.set_yticks(range(len(a)), a)
    heat.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    heat.set_xlabel("sentence B")
    heat.set_ylabel("sentence A")
    heat.set_title("token-by-token cosine (mixed vectors)")
    figure.colorbar(image, ax=heat, fraction=0.05, pad=0.02)
    figure.tight_layout()
    return save_figure(figure, path)


def plot_mixes(mixes: Mapping[str, tuple[list[float], float]], path: PathLike, title: str = "") -> Path:
    """Bars of each component's learned layer weights (softmax(s), each layer's share of the mix: they sum to 1), gamma
    in its legend label. The axis starts at 0, so a small lean from equal weights is drawn as small. Returns the file
    written (:func:`figure_file`)."""
    figure, axes = new_figure(figsize=(8, 4.3))
    n_layers = max(len(weights) for weights, _ in mixes.values())
    width = 0.8 / len(mixes)
    for k, (name, (weights, gamma)) in enumerate(mixes.items()):
        xs = [layer + (k - (len(mixes) - 1) / 2) * width for layer in range(len(weights))]
        bars = axes.bar(xs, weights, width, label=f"{name} (gamma {gamma:.2f})")
        axes.bar_label(bars, fmt="%.3f", fontsize=8, label_type="center", color="white")  # clear of the line
    axes.axhline(1 / n_layers, color="gray", linewidth=0.8, linestyle="--", label=f"equal weights (1/{n_layers})")
    axes.set_xticks(range(n_layers), ["layer 0 (char CNN)"] + [f"layer {k} (LSTM {k})" for k in range(1, n_layers)])
    highest = max(max(weights) for weights, _ in mixes.values())
    axes.set_ylim(0.0, 1.35 * max(highest, 1 / n_layers))  # room above the bars and the line for the legend
    axes.set_ylabel("weight in the mix (softmax; sums to 1)")
    lines = (title or "ELMo layer weights learned by spacy train").split("\n")
    title = "\n".join(textwrap.fill(line, 92, break_on_hyphens=False) for line in lines)  # within the figure's width
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8, loc="upper right", ncol=2)
    figure.tight_layout()
    return save_figure(figure, path)


def save_figure(figure: Any, path: PathLike, dpi: int = 120) -> Path:
    """``figure.savefig(path)``'s file, written whole (:func:`~spacy_elmo.groundwork.atomic_write.atomic_path`): a
    failed or interrupted plot leaves no half image. Returns the file written.

    The format and the name are :func:`figure_file`'s, the ones ``savefig`` gives ``path``. The format is passed
    explicitly, since the temporary file's suffix is another.
    """
    name, fmt = figure_file(path)
    with atomic_path(name) as tmp:
        figure.savefig(tmp, format=fmt, dpi=dpi)
    return name
