"""A model card (README.md) for a trained biLM, written from its options.json and metrics.json."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Optional

from ...bilm.weights import parameter_count, read_options
from ...groundwork.atomic_write import write_text_atomically
from ...groundwork.file_names import METRICS, MODEL_CARD, OPTIONS, WEIGHTS, PathLike
from .stages import describe_source
from .stages import read_metrics as read_checked_metrics

DEFAULT_TITLE = "spacy-elmo biLM"  # a card's title unless the caller names the model


def display_command(command: str) -> str:
    """The recorded ``sys.argv`` as a user would type it (``python -m spacy_elmo`` / ``spacy-elmo``), paths
    shortened."""
    parts = shlex.split(command) if command else []
    if parts and parts[0].endswith("__main__.py"):
        parts[0] = "python -m spacy_elmo"
    elif parts and parts[0].endswith("spacy-elmo"):
        parts[0] = "spacy-elmo"
    return " ".join(parts)


def _ppl(record: dict[str, Any], prefix: str) -> str:
    return f"{record[prefix + '_forward']:.1f} / {record[prefix + '_backward']:.1f}"


def render_model_card(
    directory: PathLike, title: str = DEFAULT_TITLE, notes: str = "", metrics: Optional[dict[str, Any]] = None
) -> str:
    """The Markdown text of the card for the model in ``directory``: one section after the other, each from its own
    function below, so a section can be read (and changed) without the others.

    ``metrics``: what to show instead of the folder's ``metrics.json`` (a result about to be recorded). A value the
    card shows as a number that is not one is a ValueError naming it (:func:`check_card_metrics`).
    """
    directory = Path(directory)
    options = json.loads((directory / OPTIONS).read_text(encoding="utf-8"))
    if metrics is None:
        metrics = read_metrics(directory / METRICS)
    check_card_metrics(metrics, directory / METRICS)
    stages = metrics.get("stages") or []
    try:
        lines = [
            *_introduction(title),
            *_architecture(directory, options, metrics),
            *_training_data(metrics, stages),
            *_how_it_was_trained(metrics),
            *_stage_lines(stages, metrics.get("total_words_seen")),
            *_perplexity(metrics),
            *_notes(notes),
            *_continue_training(),
        ]
    except (AttributeError, KeyError, TypeError, ValueError) as err:  # a shape no check above foresaw
        problem = f"{type(err).__name__}: {err}"
        raise ValueError(
            f"the model card of {directory} cannot be written from its {OPTIONS} and {METRICS} ({problem})"
        ) from err
    return "\n".join(lines)


# the keys whose values the card shows as numbers, wherever metrics.json holds them (outside "config", which it
# shows as written): a value of another type is refused by name before a file changes, not a TypeError half-way
NUMBER_KEYS = frozenset(
    {
        "wall_time_s",
        "train_seconds",
        "steps",
        "step",
        "words_seen",
        "total_words_seen",
        "vocab_size",
        "epoch",
        "words",
        "distinct_words",
        "softmax",
        "tokens_per_s",
        "forward",
        "backward",
        "train_ppl_forward",
        "train_ppl_backward",
        "valid_ppl_forward",
        "valid_ppl_backward",
    }
)


def read_metrics(path: Path) -> dict[str, Any]:
    """A model's ``metrics.json``, checked against its schema, else a ValueError naming the file and the field."""
    return read_checked_metrics(path, "correct it, then record again (nothing was changed)")


def check_card_metrics(metrics: dict[str, Any], path: PathLike = METRICS) -> None:
    """A ValueError naming the first value the card would show as a number that is not one (nor null), and where in
    ``path`` it is (``best.valid_ppl_forward``, ``test.NAME.forward``, ``stages[1].wall_time_s``)."""
    problem = _first_non_number(metrics, "")
    if problem:
        where, value = problem
        raise ValueError(
            f"{path}: {where} is {json.dumps(value)}, not a number: correct it, then record again (nothing was changed)"
        )


def _first_non_number(value: Any, where: str) -> Optional[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}" if where else str(key)
            if key == "config" and not where:
                continue
            shown = key in NUMBER_KEYS and item is not None and not isinstance(item, dict)  # (a result's name)
            if shown and (isinstance(item, bool) or not isinstance(item, (int, float))):
                return inner, item
            found = _first_non_number(item, inner)
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_non_number(item, f"{where}[{index}]")
            if found:
                return found
    return None


def _introduction(title: str) -> list[str]:
    """The title and what kind of files the model is."""
    return [
        f"# {title}",
        "",
        "An ELMo bidirectional language model in the standard bilm-tf / AllenNLP layout (`options.json` + "
        "`weights.hdf5`, float32), trained from scratch with `spacy-elmo train`.",
    ]


def _architecture(directory: Path, options: dict[str, Any], metrics: dict[str, Any]) -> list[str]:
    """The "Architecture" section: the network's shape, its parameter counts and file size, the output vocabulary."""
    lstm, cnn = options["lstm"], options["char_cnn"]
    config = metrics.get("config", {})
    size = sum((directory / n).stat().st_size for n in (OPTIONS, WEIGHTS) if (directory / n).is_file())
    parameters = parameter_count(read_options(directory / OPTIONS))
    return [
        "",
        "## Architecture",
        "",
        f"- character CNN: char embedding {cnn['embedding']['dim']}, filters {cnn['filters']}, "
        f"{cnn['n_highway']} highway layer(s), projection to {lstm['projection_dim']}",
        f"- biLSTM: {lstm['n_layers']} layers per direction, {lstm['dim']} cells projected to "
        f"{lstm['projection_dim']}, "
        f"skip connections {'on' if lstm.get('use_skip_connections') else 'off'}, clipping "
        f"{'none' if lstm.get('cell_clip') is None else lstm['cell_clip']}",
        f"- ELMo output: {lstm['n_layers'] + 1} layers x {2 * lstm['projection_dim']} dimensions",
        f"- parameters: {parameters:,} in the biLM (options.json + weights.hdf5: "
        f"{size / 1e6:.1f} MB), plus {metrics.get('parameters', {}).get('softmax', 0):,} in the adaptive softmax "
        f"(`softmax.safetensors`, only for perplexity and further training)",
        f"- output vocabulary (`vocab.txt`): {metrics.get('vocab_size', 0):,} words = `<S>`, `</S>`, `<UNK>` "
        f"+ the words seen at least {config.get('min_count', 1)} times (at most {config.get('vocab_size')}); "
        "adaptive softmax cutoffs "
        f"{config.get('cutoffs')}, div_value {config.get('div_value')}, shared by both directions",
    ]


def _training_data(metrics: dict[str, Any], stages: list[dict[str, Any]]) -> list[str]:
    """The "Training data" section: a table of the training files (or, for a prepared corpus, the sources of the
    last stage, with their provenance), the corpus size, how text became sentences, the validation files."""
    config = metrics.get("config", {})
    corpus = metrics.get("corpus", {})
    lines = ["", "## Training data", "", "| file | format | tokenizer |", "|---|---|---|"]
    for source in corpus.get("train", []):
        lines.append(
            f"| `{_cell(_short(source['path']))}` | {_cell(source['format'])} | {_cell(source['tokenizer'])} |"
        )
    if corpus.get("prepared") and stages:
        for source in stages[-1].get("sources", []):
            layout, tokenizer = source.get("layout"), source.get("tokenizer")
            lines.append(f"| {_cell(describe_source(source))} | {_cell(layout)} | {_cell(tokenizer)} |")
    return [
        *lines,
        "",
        f"{corpus.get('words', 0):,} words ({corpus.get('distinct_words', 0):,} distinct). Lines (`lines`) and "
        "paragraphs "
        f"(`raw`, hard-wrapped lines joined) are split into sentences after `.`, `!` and `?` tokens and cut at "
        f"{config.get('max_length')} tokens; blank lines are skipped, everything else (WikiText headings and its own "
        "`<unk>` tokens included) is kept as text. Validation: "
        + ", ".join(f"`{_short(s['path'])}`" for s in corpus.get("valid", []))
        + ".",
    ]


def _how_it_was_trained(metrics: dict[str, Any]) -> list[str]:
    """The "How it was trained" section: the command as typed, the optimiser settings, how long it ran, which
    checkpoint was exported, then the runs it was initialised from."""
    config = metrics.get("config", {})
    corpus = metrics.get("corpus", {})
    best = metrics.get("best") or {}
    # an export made during a run (--eval-every) has no end-of-run figures yet: its stage's record holds them
    stage = (metrics.get("stages") or [{}])[-1]

    def figure(key: str, default: Any = 0) -> Any:
        return metrics.get(key, stage.get(key, default)) or default

    words_seen = figure("words_seen")
    return [
        "",
        "## How it was trained",
        "",
        "```bash",
        display_command(metrics.get("command", "")),
        "```",
        "",
        f"- seed {config.get('seed')}, Adam lr {config.get('lr')} ({config.get('lr_schedule')} decay to "
        f"{config.get('min_lr_ratio')} x lr, {config.get('warmup_steps')} warm-up steps), gradient clipping "
        f"{config.get('clip_norm')}, dropout {config.get('dropout')}, {config.get('token_budget')} padded tokens per "
        "batch",
        f"- {figure('steps', best.get('step', 0)):,} steps, {words_seen:,} words seen "
        f"({words_seen / max(1, corpus.get('words', 1)):.2f} epochs), wall time "
        f"{figure('wall_time_s') / 60:.0f} min (of which {figure('train_seconds') / 60:.0f} min "
        f"in training steps), {config.get('threads') or 'default'} CPU thread(s)",
        f"- the exported files are the checkpoint with the best validation perplexity (step {best.get('step')})",
        *_init_from_lines(metrics.get("init_from")),
    ]


def _init_from_lines(previous: Optional[dict[str, Any]]) -> list[str]:
    """The chain of models this one continued (``--init-from``), newest first: each one's command and run, where
    recorded."""
    lines: list[str] = []
    while previous:
        command = previous.get("command")
        lines += ["", f"Initialised from `{previous['model']}`" + (", trained with:" if command else "."), ""]
        if command:
            lines += ["```bash", display_command(command), "```", "", _earlier_run(previous)]
        previous = previous.get("init_from")
    return lines


def _earlier_run(previous: dict[str, Any]) -> str:
    """One line on a run this model was initialised from: steps, words seen, and its wall time and validation
    perplexity where recorded."""
    best = previous.get("best") or {}
    wall = previous.get("wall_time_s")
    return (
        f"- {previous.get('steps') or 0:,} steps, {previous.get('words_seen') or 0:,} words seen"
        + (f", wall time {wall / 60:.0f} min" if wall else "")
        + (f", validation perplexity {_ppl(best, 'valid_ppl')}" if "valid_ppl_forward" in best else "")
    )


def _perplexity(metrics: dict[str, Any]) -> list[str]:
    """The "Perplexity" section: the exported checkpoint's validation perplexity, each test set's, and the
    validation history."""
    corpus = metrics.get("corpus", {})
    best = metrics.get("best") or {}
    lines = [
        "",
        "## Perplexity",
        "",
        "Per predicted token (each word plus one sentence end per sentence), each sentence on its own (no state "
        "carried across sentences), same tokenization and sentence splitting as in training. `forward / backward`:",
        "",
        "| data | forward / backward |",
        "|---|---|",
    ]
    if "valid_ppl_forward" in best:
        lines.append(
            f"| validation ({_cell(', '.join(_short(s['path']) for s in corpus.get('valid', [])))}) | "
            f"{_ppl(best, 'valid_ppl')} |"
        )
    for name, result in (metrics.get("test") or {}).items():
        lines.append(f"| {_cell(name)} | {result['forward']:.1f} / {result['backward']:.1f} |")
    return lines + _validation_history(metrics.get("evaluations", []) + metrics.get("epochs", []))


def _validation_history(records: list[dict[str, Any]]) -> list[str]:
    """The table of validations during training, by step; records without a validation perplexity are left out."""
    history = sorted((h for h in records if "valid_ppl_forward" in h), key=lambda h: h["step"])
    if not history:
        return []
    lines = [
        "",
        "Validation during training:",
        "",
        "| step | epoch | train fwd / bwd | valid fwd / bwd | tokens/s |",
        "|---|---|---|---|---|",
    ]
    for h in history:
        train = f"{h['train_ppl_forward']:.1f} / {h['train_ppl_backward']:.1f}" if "train_ppl_forward" in h else ""
        lines.append(
            f"| {h['step']} | {float(h['epoch']):.2f} | {train} | {_ppl(h, 'valid_ppl')} | "
            f"{h.get('tokens_per_s', '')} |"
        )
    return lines


def _notes(notes: str) -> list[str]:  # card_title_and_notes reads it back
    """The optional "Notes" section, the caller's text as given (stripped)."""
    return ["", "## Notes", "", notes.strip()] if notes else []


def _continue_training() -> list[str]:
    """The closing "Continue training" section: the files that ship for it and the command."""
    return [
        "",
        "## Continue training",
        "",
        "`vocab.txt` and `softmax.safetensors` ship with the model, so fine-tuning continues the whole language model:",
        "",
        "```bash",
        "spacy-elmo train NEW_DIR --init-from MODEL_DIR --train MORE_TEXT.txt --valid VALID.txt --epochs 1",
        "```",
        "",
    ]


def _stage_lines(stages: list[dict[str, Any]], total: Any) -> list[str]:
    """The "Training stages" section: every run the model went through, oldest first, and the words seen by all."""
    if not stages:
        return []
    lines = [
        "",
        "## Training stages",
        "",
        "Each stage continued the exported model of the one before (`--init-from`).",
        "",
        "| stage | data | words seen | wall time | validation perplexity (fwd / bwd) |",
        "|---|---|---|---|---|",
    ]
    for number, stage in enumerate(stages, 1):
        data = "<br>".join(_cell(describe_source(s)) for s in stage.get("sources") or [])
        if not data and stage.get("command"):
            data = f"`{_cell(display_command(stage['command']))}`"
        wall = stage.get("wall_time_s")
        ppl = stage.get("valid_perplexity") or {}
        lines.append(
            f"| {number} | {data} | {int(stage.get('words_seen') or 0):,} | "
            + ("" if wall is None else f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s")
            + " | "
            + (f"{ppl['forward']:.1f} / {ppl['backward']:.1f}" if "forward" in ppl else "")
            + " |"
        )
    lines += ["", f"Words seen over all stages: **{int(total or 0):,}**."]
    return lines


def _cell(value: Any) -> str:
    """``value`` as the text of one Markdown table cell: a ``|`` escaped (in code spans too), line breaks as spaces,
    so a name or path holding them cannot break the table."""
    return " ".join(str(value).replace("|", "\\|").splitlines())


def _short(path: str) -> str:
    """A text file as the card shows it: as the run recorded it (a name, or a path inside the model's folder); an
    older run's path from the root from its ``data`` folder on (``/x/data/x/y.txt`` -> ``data/x/y.txt``: the part
    that names the data set), else by name."""
    where = Path(path)
    if not where.is_absolute():
        return where.as_posix()
    parts = where.parts
    return str(Path(*parts[parts.index("data") :])) if "data" in parts else where.name


def write_model_card(directory: PathLike, title: str = DEFAULT_TITLE, notes: str = "") -> Path:
    """Write ``README.md`` into ``directory`` (whole or not at all); returns its path."""
    path = Path(directory) / MODEL_CARD
    write_text_atomically(path, render_model_card(directory, title, notes))
    return path


def refresh_model_card(directory: PathLike) -> Path:
    """Rewrite the card from the model's files (after its ``metrics.json`` changed), keeping the title and the
    "Notes" section of the card already there: what someone wrote into a card outlives a recorded result."""
    path = Path(directory) / MODEL_CARD
    write_text_atomically(path, refreshed_card(directory))
    return path


def refreshed_card(directory: PathLike, metrics: Optional[dict[str, Any]] = None) -> str:
    """The card :func:`refresh_model_card` writes, of ``metrics`` (default: the folder's ``metrics.json``)."""
    path = Path(directory) / MODEL_CARD
    title, notes = card_title_and_notes(path.read_text(encoding="utf-8")) if path.is_file() else (None, "")
    return render_model_card(directory, title or DEFAULT_TITLE, notes, metrics)


def card_title_and_notes(text: str) -> tuple[Optional[str], str]:
    """The title (``# ...``, None without one) and the "Notes" section's text ("" without one) of a card that
    :func:`render_model_card` wrote: the notes run from their heading to the closing "Continue training" one."""
    lines = text.splitlines()
    title = next((line[2:].strip() for line in lines if line.startswith("# ")), None)
    start, end = "\n## Notes\n", "\n## Continue training\n"
    if start not in text:
        return title, ""
    notes = text.split(start, 1)[1]
    return title, notes.rsplit(end, 1)[0].strip() if end in notes else notes.strip()
