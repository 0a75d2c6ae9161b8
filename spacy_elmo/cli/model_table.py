"""What ``spacy-elmo models`` prints: every model a name gives (the bundled ``default`` and its versions'
own names, the published ones),
as plain-text lines that fit in :data:`WIDTH` columns.

One row per model, the long descriptions wrapped in the last column (``textwrap``); models that
share everything but their language (ELMoForManyLangs' 44) are one block: what they share once,
then their names and languages packed in columns. ``spacy-elmo info NAME`` gives one model in full.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Optional

from ..bilm.weights import parameter_count, read_options
from ..groundwork.file_names import METRICS, OPTIONS
from ..groundwork.schema_check import FileSchemaError
from ..sources import bundled_versions
from ..sources.model_paths import DEFAULT_MODEL_DIR, find_weights
from ..sources.published import PUBLISHED, PublishedModel
from .model_info import corpus_names, read_metrics, training_totals

WIDTH = 100
HEADER = ("name", "language", "params", "size", "cached", "trained on; by; licence")
GROUP_MIN = 3  # models sharing every fact but their language, shown as one block from this many on
GAP = "  "


def model_lines(is_cached: Callable[[str], bool], width: int = WIDTH) -> list[str]:
    """The listing's lines (none longer than ``width``); ``is_cached(url)`` says whether a file is in the cache."""
    singles, groups = _split(PUBLISHED.values())
    rows = [_default_row(), *map(_version_row, bundled_versions.VERSIONS.values())]
    rows += [_published_row(entry, is_cached) for entry in singles]
    lines = _table([HEADER, *(row for row in rows if row is not None)], width)
    for group in groups:
        lines += ["", *_group_lines(group, is_cached, width)]
    return lines


def _split(entries: Iterable[PublishedModel]) -> tuple[list[PublishedModel], list[list[PublishedModel]]]:
    """Models shown on their own row, and blocks of models that differ only in name and language."""
    by_facts: dict[tuple, list[PublishedModel]] = {}
    for entry in entries:
        facts = (entry.architecture, entry.trained_on, entry.source, entry.licence, entry.parameters_m, entry.approx_mb)
        by_facts.setdefault(facts, []).append(entry)
    groups = [group for group in by_facts.values() if len(group) >= GROUP_MIN]
    grouped = {entry.name for group in groups for entry in group}
    return [entry for entry in PUBLISHED.values() if entry.name not in grouped], groups


def _published_row(entry: PublishedModel, is_cached: Callable[[str], bool]) -> tuple[str, ...]:
    return (
        entry.name,
        entry.language,
        f"{entry.parameters_m:g}M" if entry.parameters_m else "?",
        f"~{entry.approx_mb} MB" if entry.approx_mb else "?",
        "yes" if all(is_cached(url) for url in entry.urls) else "no",
        f"{entry.trained_on}; {entry.publisher}; licence: {entry.licence}",
    )


def _version_row(version: bundled_versions.BundledVersion) -> Optional[tuple[str, ...]]:
    """A bundled version's row under its own name (``"default-v1"``), which keeps naming it after the default moves
    on (``None`` when this installation lacks its files)."""
    if not (version.directory / OPTIONS).is_file():
        return None
    now = "what 'default' names now" if version.name == bundled_versions.DEFAULT_VERSION else "an earlier default"
    return (version.name, "English", *_bundled_size(version.directory), "bundled", f"{version.summary}; {now}")


def _default_row(directory: Path = DEFAULT_MODEL_DIR) -> Optional[tuple[str, ...]]:
    """The bundled model's row, from its own files (``None`` when this installation has none)."""
    if not (directory / OPTIONS).is_file():
        return None
    trained = "spacy-elmo train"
    metrics = _metrics(directory / METRICS)
    if metrics is not None:
        corpus, seen = metrics.get("corpus", {}), training_totals(metrics)[1] if "wall_time_s" in metrics else 0
        text = f"a {corpus['words'] / 1e6:.1f}M-word corpus" if corpus.get("words") else "a corpus"
        names = corpus_names(corpus)
        text += f" ({', '.join(names)})" if names else ""
        trained = f"{seen / 1e6:.1f}M words seen of {text}" if seen else text
        trained += "; spacy-elmo train"
    version = f"{bundled_versions.DEFAULT_VERSION}: " if directory == DEFAULT_MODEL_DIR else ""
    licence = "licence: see its README.md (spacy-elmo info default)"
    return ("default", "English", *_bundled_size(directory), "bundled", f"{version}{trained}; {licence}")


def _metrics(path: Path) -> Optional[dict[str, Any]]:
    """The bundled model's ``metrics.json``; ``None`` where it is missing or damaged (the row then says less;
    ``spacy-elmo info default`` names the damage)."""
    if not path.is_file():
        return None
    try:
        return read_metrics(path)
    except FileSchemaError:
        return None


def _bundled_size(directory: Path) -> tuple[str, str]:
    """The params and size cells of a bundled model's folder."""
    weights = find_weights(directory)
    return f"{parameter_count(read_options(directory / OPTIONS)) / 1e6:.1f}M", f"{weights.stat().st_size / 1e6:.0f} MB"


def _table(rows: list[tuple[str, ...]], width: int) -> list[str]:
    """Columns as wide as their longest cell, the last one wrapped into what is left of ``width``."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    indent = sum(widths) + len(GAP) * len(widths)
    last = max(20, width - indent)
    lines = []
    for row in rows:
        head = GAP.join(cell.ljust(w) for cell, w in zip(row, widths)) + GAP
        wrapped = textwrap.wrap(row[-1], last, break_on_hyphens=False) or [""]
        lines.append((head + wrapped[0]).rstrip())
        lines += [" " * indent + more for more in wrapped[1:]]
    return lines


def _group_lines(group: list[PublishedModel], is_cached: Callable[[str], bool], width: int) -> list[str]:
    """What a block of models shares, wrapped, then ``name  language  cached`` cells packed in columns."""
    first = group[0]
    size = f", ~{first.approx_mb} MB each" if first.approx_mb else ""
    shared = (
        f"{first.publisher}: {len(group)} models, one per language{size}: {first.architecture}; trained on "
        f"{first.trained_on}; licence: {first.licence}. Name, language, cached:"
    )
    cells = [
        (entry.name, entry.language, "yes" if all(is_cached(url) for url in entry.urls) else "no") for entry in group
    ]
    widths = [max(len(cell[i]) for cell in cells) for i in range(3)]
    cell_width = sum(widths) + len(GAP) * 2
    per_line = max(1, (width - 2 + len(GAP) * 2) // (cell_width + len(GAP) * 2))
    texts = [GAP.join(part.ljust(w) for part, w in zip(cell, widths)) for cell in cells]
    packed = [
        ("  " + (GAP * 2).join(texts[start : start + per_line])).rstrip() for start in range(0, len(texts), per_line)
    ]
    return [*textwrap.wrap(shared, width), *packed]
