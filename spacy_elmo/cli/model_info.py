"""What ``spacy-elmo info`` prints: a biLM's architecture, size, training corpus and perplexities, read from its
files, or a published model's entry in the published table when its files are not downloaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..bilm import engine, manylangs_reader
from ..bilm.weights import check_model_files, parameter_count
from ..groundwork.schema_check import FileSchemaError, read_json_file
from ..sources.download import is_cached
from ..sources.model_paths import METRICS, is_manylangs, resolve_model_files
from ..sources.published import PublishedModel, published_model

CHECKED = "checked:      every check loading makes passed (options, each dataset's shape and dtype, finite values)"


def describe_model(model: str) -> str:
    """The text ``spacy-elmo info MODEL`` prints: a published model whose files are not all in the download cache
    from the published table alone (:func:`describe_published`: nothing is downloaded), else the model's files
    (:func:`describe`). A local folder of a published model's name is that folder, as everywhere a model is named."""
    entry = published_model(model)
    if entry is not None and not Path(model).expanduser().is_dir() and not all(is_cached(u) for u in entry.urls):
        return describe_published(entry)
    return describe(*resolve_model_files(model))


def describe(options_path: Path, weights_path: Path) -> str:
    """Lines of text describing the model whose files these are (either format).

    The files first pass every check loading makes (nothing is built): a model that would not load raises
    :class:`~spacy_elmo.WeightFileError` here, as loading would, instead of being described.
    """
    if is_manylangs(options_path, weights_path):
        return _describe_manylangs(weights_path.parent)
    options = check_model_files(options_path, weights_path)
    directory = options_path.parent
    lines: list[str] = [
        f"model:        {directory}",
        f"weights:      {weights_path.name} ({weights_path.stat().st_size / 1e6:.1f} MB)",
        f"architecture: char CNN {[list(f) for f in options.filters]} (char dim {options.char_embed_dim}, "
        f"{options.n_highway} highway) -> {options.n_layers} x biLSTM {options.cell_dim} cells, projection "
        f"{options.projection_dim}, skip connections {'on' if options.use_skip_connections else 'off'}, "
        f"clipping cell={options.cell_clip} proj={options.proj_clip}",
        f"output:       {options.n_layers + 1} layers x {options.output_dim} dims",
        f"parameters:   {parameter_count(options):,} (biLM, without the softmax)",
        CHECKED,
    ]
    support = engine.summary()
    precisions = "; ".join(f"{name} {what}" for name, what in engine.precision_support().items())
    lines.append(
        f"this machine: {support['cpu vendor']} {support['cpu flags']} (ATen {support['aten capability']}); "
        f"{precisions}; precision='auto' -> {support['auto (cpu)']}"
    )
    metrics_path = directory / METRICS
    if metrics_path.is_file():
        try:
            lines += _metrics_lines(read_metrics(metrics_path))
        except FileSchemaError as err:  # what it says of the training is not shown; the model itself loads
            lines.append(f"training:     not shown, {err}")
    else:
        lines.append("training:     no metrics.json (not trained by spacy-elmo train)")
    return "\n".join(lines)


def read_metrics(path: Path) -> dict[str, Any]:
    """A model's ``metrics.json``, checked against its schema (:class:`~spacy_elmo.bilm.file_formats.Metrics`); a
    :class:`~spacy_elmo.groundwork.schema_check.FileSchemaError` naming the file and the field otherwise. Informational:
    the model loads without it, so the error says it can be corrected or deleted."""
    from ..bilm.file_formats import Metrics

    advice = "correct it, or delete it (the model loads without it; only its training history is lost)"
    metrics: dict[str, Any] = read_json_file(path, Metrics, advice)
    return metrics


def _describe_manylangs(directory: Path) -> str:
    """The lines of :func:`describe` for an ELMoForManyLangs model (its architecture file; nothing is built)."""
    config = manylangs_reader.check_model_files(directory).config
    words = f"word embedding {config.word_dim} + " if config.word_dim else "no word embedding, "
    sizes = sum(p.stat().st_size for p in manylangs_reader.source_files(directory)) / 1e6
    return "\n".join(
        [
            f"model:        {directory} (ELMoForManyLangs format, {sizes:.1f} MB)",
            f"architecture: {words}char CNN {[list(f) for f in config.filters]} (char dim {config.char_dim}, "
            f"{config.n_highway} highway) -> {config.n_layers} x biLSTM {config.cell_dim} cells, projection "
            f"{config.projection_dim}, residual, clipping cell={config.cell_clip} proj={config.proj_clip}",
            f"output:       {config.n_layers + 1} layers x {2 * config.projection_dim} dims",
            "checked:      every check loading makes passed (architecture, dictionaries, each tensor's name, shape, "
            "dtype, finite values)",
        ]
    )


def describe_published(entry: PublishedModel) -> str:
    """Lines of text describing a published model from the table alone (nothing is downloaded)."""
    params = (
        f"{entry.parameters_m:g}M (biLM, without the softmax)" if entry.parameters_m else "not stated by the publisher"
    )
    size = f"about {entry.approx_mb} MB" if entry.approx_mb else "not stated"
    return "\n".join(
        [
            f"model:        {entry.name} (published by {entry.publisher}; not downloaded)",
            f"architecture: {entry.architecture}",
            f"parameters:   {params}",
            f"files:        {size}, {', '.join(entry.urls)}",
            f"language:     {entry.language}; licence: {entry.licence}",
            f"trained on:   {entry.trained_on}",
            f"download:     spacy-elmo download {entry.name} (then `spacy-elmo info {entry.name}` reads its files)",
        ]
    )


def corpus_names(corpus: dict[str, Any]) -> list[str]:
    """The training text a ``metrics.json`` names: its text files (``folder/file``, or the name alone where the run
    recorded no folder) and its prepared corpus folders (``spacy-elmo prepare-corpus``'s output, which a run given
    ``--corpus`` records under ``"prepared"``)."""
    files = [_file_name(Path(source["path"])) for source in corpus.get("train") or []]
    return files + [Path(folder).name for folder in corpus.get("prepared") or []]


def _file_name(path: Path) -> str:
    """``folder/file``, or ``file`` where the record names no folder (a run records a file outside its own folder
    by its name: train/output_folder/recorded_paths)."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def training_totals(metrics: dict[str, Any]) -> tuple[float, int, int]:
    """Wall seconds, words seen and runs of the whole training history a ``metrics.json`` records.

    The ``stages`` list (every run, oldest first, each with its wall time and words) is summed where there is one: the
    ``init_from`` chain may lack a run's wall time (the bundled default's first run has none there). A model trained
    before stages were recorded has only that chain: its own run and each run the chain names.
    """
    stages = metrics.get("stages")
    if isinstance(stages, list) and stages:
        wall = sum(float(stage.get("wall_time_s") or 0) for stage in stages)
        words = sum(int(stage.get("words_seen") or 0) for stage in stages)
        return wall, words, len(stages)
    wall, words, runs, previous = metrics["wall_time_s"], metrics.get("words_seen", 0), 1, metrics.get("init_from")
    while previous and previous.get("command"):
        wall += previous.get("wall_time_s") or 0
        words += previous.get("words_seen") or 0
        runs += 1
        previous = previous.get("init_from")
    return wall, words, runs


def _metrics_lines(metrics: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    corpus = metrics.get("corpus", {})
    names = corpus_names(corpus)
    if names:
        lines.append(f"corpus:       {', '.join(names)} ({corpus.get('words', 0):,} words)")
    if "vocab_size" in metrics:
        lines.append(
            f"softmax:      {metrics['vocab_size']:,} words, {metrics.get('parameters', {}).get('softmax', 0):,} "
            "parameters"
        )
    best = metrics.get("best") or {}
    if "valid_ppl_forward" in best:
        lines.append(
            f"valid ppl:    forward {best['valid_ppl_forward']}, backward {best.get('valid_ppl_backward')} "
            f"(step {best.get('step')}, epoch {best.get('epoch') or 0:.2f})"
        )
    for name, result in (metrics.get("test") or {}).items():
        lines.append(f"test ppl:     forward {result['forward']:.2f}, backward {result['backward']:.2f} ({name})")
    if "wall_time_s" in metrics:
        wall, words, runs = training_totals(metrics)
        lines.append(
            f"train time:   {wall / 60:.1f} min wall ({wall / 3600:.1f} h), {words:,} words seen "
            f"({runs} run{'s' if runs > 1 else ''})"
        )
    return lines
