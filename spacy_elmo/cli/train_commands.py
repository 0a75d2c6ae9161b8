"""The training commands: ``train``, ``prepare-corpus``, ``evaluate`` and ``adapt``. Each checks its arguments before
torch is imported, then hands the work to train/ (adapt: to spacy/adapt.py, which trains through train/)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from ..train.config import DEFAULT_SHARD_SENTENCES, TrainConfig, option_flags
from .errors import errors_exit_2
from .input_files import require_inputs
from .typer_app import command

_TRAIN_DEFAULTS = TrainConfig(train=[])  # the training defaults prepare-corpus and adapt share
_DEVICE_HELP = "cpu, cuda, cuda:N, or auto (CUDA when torch sees a GPU, else the CPU)"
# the TrainConfig fields that are `spacy-elmo train` options (train, valid and corpus: the command's own sources)
_CONFIG_OPTIONS = {field.name: field for field in dataclasses.fields(TrainConfig) if "help" in field.metadata}


def _config_option(name: str, shown: Callable[[Any], Any] = lambda default: default) -> Any:
    """The ``spacy-elmo train`` option of TrainConfig's field ``name``: the field's flags, help and default
    (``shown``: the default as the option spells it, where the option is text)."""
    config_field = _CONFIG_OPTIONS[name]
    return typer.Option(shown(config_field.default), *option_flags(config_field), help=config_field.metadata["help"])


@command("train")
def train(
    ctx: typer.Context,
    output_dir: Path = typer.Argument(
        ..., help="Directory for options.json, weights.hdf5, vocab, checkpoint and metrics"
    ),
    train_files: list[Path] = typer.Option(
        [],
        "--train",
        "-t",
        help="Training text, one sentence (or paragraph) per line; repeatable; a directory means its *.txt files",
    ),
    raw_files: list[Path] = typer.Option(
        [], "--raw", help="Training text as running prose (paragraphs split into sentences); repeatable"
    ),
    valid_files: list[Path] = typer.Option(
        [], "--valid", "-v", help="Validation text, one sentence or paragraph per line; repeatable"
    ),
    corpus_dirs: list[Path] = typer.Option(
        [], "--corpus", help="Train on a prepared corpus (spacy-elmo prepare-corpus) instead of text files; repeatable"
    ),
    tokenizer: str = typer.Option("whitespace", help="Tokenizer for --train/--valid lines: whitespace or spacy"),
    raw_tokenizer: str = typer.Option("spacy", help="Tokenizer for --raw text: spacy or whitespace"),
    # TrainConfig's fields, in its order: each option's flags, help and default are its field's
    architecture: str = _config_option("architecture"),  # a name or path here, a path or dict in Python
    vocab_size: int = _config_option("vocab_size"),
    min_count: int = _config_option("min_count"),
    epochs: float = _config_option("epochs"),
    token_budget: int = _config_option("token_budget"),
    lr: float = _config_option("lr"),
    lr_schedule: str = _config_option("lr_schedule"),
    min_lr_ratio: float = _config_option("min_lr_ratio"),
    warmup_steps: int = _config_option("warmup_steps"),
    clip_norm: float = _config_option("clip_norm"),
    dropout: float = _config_option("dropout"),
    seed: int = _config_option("seed"),
    max_length: int = _config_option("max_length"),
    cutoffs: str = _config_option("cutoffs", lambda ranks: ",".join(map(str, ranks))),  # "2000,10000"
    div_value: float = _config_option("div_value"),
    eval_every: int = _config_option("eval_every"),
    checkpoint_every: int = _config_option("checkpoint_every"),
    max_steps: Optional[int] = _config_option("max_steps"),
    max_minutes: Optional[float] = _config_option("max_minutes"),
    threads: Optional[int] = _config_option("threads"),
    lstm_impl: str = _config_option("lstm_impl"),
    init_from: Optional[Path] = _config_option("init_from"),  # noqa: B008 (typer.Option, as the others)
    buffer_size: int = _config_option("buffer_size"),
    precision: str = _config_option("precision"),
    continue_corpus: bool = _config_option("continue_corpus"),
    # how this run goes
    resume: bool = typer.Option(False, "--resume", help="Continue from OUTPUT_DIR/checkpoint.safetensors"),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the model OUTPUT_DIR already holds (refused otherwise)"
    ),
    progress: bool = typer.Option(True, help="Show a tqdm progress bar"),
    processes: int = typer.Option(
        1,
        "--processes",
        help=(
            "Training processes on this machine, each training its share of every batch (one model, gradients summed "
            "over gloo between CPUs or nccl between GPUs, one GPU each, as under torchrun; each with --threads "
            "threads, by default the cores shared out)"
        ),
    ),
    device: str = typer.Option("cpu", "--device", help=_DEVICE_HELP),
) -> None:
    """Train (or fine-tune) a biLM on text files and export it in the bilm-tf / AllenNLP layout.

    With several processes (--processes N, or under ``torchrun --nproc_per_node N -m
    spacy_elmo train ...``) the processes train one model with
    DistributedDataParallel: --token-budget is the global batch, split across them; rank 0 alone
    writes files and prints.
    """
    from ..runtime.configuration.validation import positive_int, process_count
    from ..train.run.command_config import command_config

    with errors_exit_2():  # the sources and every option's value, checked before torch is imported
        config = command_config(
            {name: ctx.params[name] for name in _CONFIG_OPTIONS},
            train_files=train_files,
            raw_files=raw_files,
            valid_files=valid_files,
            corpus_dirs=corpus_dirs,
            tokenizer=tokenizer,
            raw_tokenizer=raw_tokenizer,
            resume=resume,
        )
        if device.strip().lower().startswith("cuda"):
            positive_int(processes, "--processes")  # one GPU each: said against torch's count before any starts
        else:
            process_count(processes, "--processes")  # at most the cores here
    from ..train.run.launch import TrainRun, run_training

    run = TrainRun(config, output_dir, errors_exit_2, resume=resume, overwrite=overwrite, progress=progress)
    status = run_training(run, processes, device)
    if status:
        raise typer.Exit(status)


@command("prepare-corpus")
def prepare_corpus(
    output_dir: Path = typer.Argument(..., help="Directory for the prepared corpus (shards, counts.tsv, corpus.json)"),
    sources: list[Path] = typer.Option(
        ..., "--source", "-s", help="A text file or a directory of them (recursively); repeatable"
    ),
    layout: str = typer.Option(
        "lines", "--format", "-f", help="lines, raw, gutenberg, wikiextractor or jsonl (the layout of every --source)"
    ),
    tokenizer: Optional[str] = typer.Option(
        None, help="whitespace or spacy (default: whitespace for lines, spacy for the other layouts)"
    ),
    source_info: Optional[Path] = typer.Option(
        None,
        help=(
            "A JSON object recorded as every source's provenance (repository, commit, path, licence); default: "
            "source-info.json in each source's directory, if any"
        ),
    ),
    max_length: int = typer.Option(_TRAIN_DEFAULTS.max_length, help="Cut sentences longer than this many tokens"),
    shard_sentences: int = typer.Option(
        DEFAULT_SHARD_SENTENCES, help="Sentences per shard file (the unit of shuffling)"
    ),
    progress: bool = typer.Option(True, help="Show a tqdm progress bar per source"),
) -> None:
    """Tokenize text files once into a prepared corpus for `spacy-elmo train --corpus`: shards, word counts, manifest.

    One streaming pass with bounded memory (the text is never held, only the word counts); the
    layouts drop Project Gutenberg's licence header/footer and WikiExtractor's markup.
    """
    import sys

    from ..train.corpus.layouts import check_layout

    with errors_exit_2():  # the arguments, checked before torch is imported
        require_inputs(*sources)
        check_layout(layout)
    from ..train.corpus.prepare import SourceSpec, read_source_info
    from ..train.corpus.prepare import prepare_corpus as run_prepare
    from ..train.output_folder.recorded_paths import recorded_command

    with errors_exit_2():
        specs = [SourceSpec(path, layout, tokenizer, read_source_info(source_info, path)) for path in sources]
        manifest = run_prepare(
            output_dir,
            specs,
            max_length=max_length,
            shard_sentences=shard_sentences,
            progress=progress,
            command=recorded_command(sys.argv, output_dir, cwd=Path.cwd()),  # paths as the corpus's folder sees them
        )
    typer.echo(
        f"prepared {output_dir}: {manifest['words']:,} words, {manifest['sentences']:,} sentences, "
        f"{manifest['distinct_words']:,} distinct words in {len(manifest['shards'])} shards "
        f"({manifest['words_per_s']:,.0f} words/s)"
    )


@command("adapt")
def adapt(
    output_dir: Path = typer.Argument(..., help="Directory for the adapted model (an ELMo model directory)"),
    train_docs: Path = typer.Option(..., "--train", help="The task's training docs (.spacy); only their text is read"),
    dev_docs: Path = typer.Option(..., "--dev", help="The task's dev docs (.spacy): perplexity before and after"),
    init_from: str = typer.Option(
        "default",
        help="The biLM to adapt: 'default' or a model directory with its softmax (published models ship none)",
    ),
    epochs: float = typer.Option(_TRAIN_DEFAULTS.epochs, help="Passes over the training text"),
    max_steps: Optional[int] = typer.Option(_TRAIN_DEFAULTS.max_steps, help="Stop after this many steps"),
    lr: float = typer.Option(_TRAIN_DEFAULTS.lr, help="Adam learning rate"),
    token_budget: int = typer.Option(_TRAIN_DEFAULTS.token_budget, help="Padded tokens per batch"),
    seed: int = typer.Option(_TRAIN_DEFAULTS.seed, help="Random seed"),
    progress: bool = typer.Option(True, help="Show what each phase is doing and a tqdm progress bar"),
    threads: Optional[int] = typer.Option(
        None, min=1, help="torch CPU threads for this process (default: torch's choice)"
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace the model OUTPUT_DIR already holds (refused otherwise)"
    ),
    device: str = typer.Option("cpu", "--device", help=_DEVICE_HELP),
) -> None:
    """Domain adaptation: fine-tune a biLM's LM on the text of a task's .spacy docs, for the elmo component.

    Writes OUTPUT_DIR (use it as [components.elmo.model] path) and OUTPUT_DIR/adaptation.json with the
    dev perplexity before and after.
    """
    from ..sources.model_names import require_model

    with errors_exit_2():
        require_inputs(train_docs, dev_docs)
        require_model(init_from)
    from ..bilm.threads import set_process_threads
    from ..spacy.adapt import AdaptOptions
    from ..spacy.adapt import adapt as run_adapt
    from ..train.allocator import keep_freed_memory

    with errors_exit_2():
        set_process_threads(threads)  # this command's own process: the user's --threads
        keep_freed_memory()  # as train does
        options = AdaptOptions(epochs=epochs, max_steps=max_steps, lr=lr, token_budget=token_budget, seed=seed)
        result = run_adapt(
            output_dir,
            train_docs,
            dev_docs,
            init_from=init_from,
            options=options,
            overwrite=overwrite,
            device=device,
            progress=progress,
        )
    before, after = result["dev_perplexity_before"], result["dev_perplexity_after"]
    typer.echo(
        f"saved to {output_dir}; dev perplexity (mean of both directions) {before['mean']:.2f} -> {after['mean']:.2f}"
    )


@command("evaluate")
def evaluate(
    model_dir: Path = typer.Argument(..., help="A model directory written by `spacy-elmo train` (or 'default')"),
    text_files: list[Path] = typer.Argument(..., help="Text files, one sentence or paragraph per line"),
    raw: bool = typer.Option(False, "--raw", help="The files are running prose (split paragraphs into sentences)"),
    tokenizer: str = typer.Option("whitespace", help="whitespace or spacy"),
    max_length: Optional[int] = typer.Option(
        None, help="Cut sentences longer than this many tokens (default: as in training)"
    ),
    output: Optional[Path] = typer.Option(None, help="Also write the result as JSON here"),
    record: Optional[str] = typer.Option(
        None, help="Store the result under this name in the model's metrics.json (and its README.md card)"
    ),
    shared_vocab: list[Path] = typer.Option(
        [],
        "--shared-vocab",
        help="Another trained model (repeatable): count only the predictions of words every one's vocabulary holds "
        "(and sentence ends), to compare models with different vocabularies on the same predictions",
    ),
    device: str = typer.Option("cpu", "--device", help=_DEVICE_HELP),
) -> None:
    """Forward, backward and mean perplexity of a trained biLM on text (per word and sentence end)."""
    from ..output.argument_checks import check_output_path
    from ..sources.model_names import require_model
    from ..train.corpus.sentences import make_sources

    with errors_exit_2():  # the arguments, checked before torch is imported
        require_inputs(*text_files)
        make_sources(text_files, "raw" if raw else "lines", tokenizer)  # (the tokenizer's name)
        for model in (model_dir, *shared_vocab):
            require_model(model)
        if output:
            check_output_path(output)
    from ..train.run.evaluation import evaluate_files, record_result, write_result

    with errors_exit_2():
        result = evaluate_files(
            model_dir,
            text_files,
            format="raw" if raw else "lines",
            tokenizer=tokenizer,
            max_length=max_length,
            shared_with=shared_vocab,
            device=device,
            record=record,
        )
    counted = f"{result['predictions']} predictions of words in every vocabulary, " if shared_vocab else ""
    typer.echo(
        f"perplexity forward {result['forward']:.2f}  backward {result['backward']:.2f}  mean {result['mean']:.2f}"
        f"  ({counted}{result['words']} words, {result['sentences']} sentences)"
    )
    if output:
        write_result(output, result)
    if record:
        with errors_exit_2():
            record_result(model_dir, record, result)
