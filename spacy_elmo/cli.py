"""The ``spacy-elmo`` command line (also ``python -m spacy_elmo``): embed, train, evaluate, info."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from .bilm.engine.precisions import dtype_help
from .cli_errors import DEBUG_ENV, debug_from_env, passes_through, say_and_exit
from .cli_errors import errors_exit_2 as _errors_exit_2
from .runtime.configuration.defaults import DEFAULT_BATCH_SIZE, DEFAULT_DTYPE
from .train.config import DEFAULT_SHARD_SENTENCES, TrainConfig, option_flags

if TYPE_CHECKING:  # pragma: no cover
    from .output.embed_file import ClusterSetUp

# The command listing of `spacy-elmo --help`, in the order a new user needs the commands (embedding first, training
# later): each command's one-sentence summary, and the examples its --help ends with.
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "embed": (
        "Embed each line of a text file into an HDF5 file.",
        (
            "spacy-elmo embed sentences.txt vectors.hdf5",
            "spacy-elmo embed sentences.txt vectors.hdf5 --model original --average",
        ),
    ),
    "info": ("Describe a model: architecture, size, corpus, perplexity.", ("spacy-elmo info default",)),
    "models": ("List the bundled and published models, and which are cached.", ("spacy-elmo models",)),
    "download": ("Fetch models into the download cache ahead of use.", ("spacy-elmo download original",)),
    "similarity": (
        "Compare one word's vectors in two sentences, layer by layer.",
        ('spacy-elmo similarity "They sat on the bank ." "The bank approved the loan ." --word bank',),
    ),
    "train": (
        "Train or fine-tune a biLM on text and export it.",
        ("spacy-elmo train my_elmo --train corpus.txt --valid dev.txt --arch small --max-minutes 60",),
    ),
    "prepare-corpus": (
        "Tokenize a large corpus once into shards for training.",
        ("spacy-elmo prepare-corpus prepared --source wiki_dump --format wikiextractor",),
    ),
    "evaluate": ("Measure a trained biLM's perplexity on text files.", ("spacy-elmo evaluate my_elmo test.txt",)),
    "adapt": (
        "Fine-tune a biLM on the text of a spaCy task's docs.",
        ("spacy-elmo adapt adapted_elmo --train train.spacy --dev dev.spacy",),
    ),
    "plot-mix": (
        "Plot the layer weights a trained spaCy pipeline learned.",
        ("spacy-elmo plot-mix training/model-best mix.png",),
    ),
    "allennlp-elmo": ("Run AllenNLP 0.9's `allennlp elmo` command on this package.", ()),  # --help: AllenNLP's
}


def _examples(lines: tuple[str, ...]) -> str:
    """A help text's example block, kept as written (click rewraps paragraphs, but not those marked with \\b)."""
    return "\b\n" + ("Example:" if len(lines) == 1 else "Examples:") + "".join(f"\n  {line}" for line in lines)


class _Commands(TyperGroup):
    """The command group: its commands listed in :data:`COMMANDS`' order, each run inside the one error boundary
    (:mod:`spacy_elmo.cli_errors`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        order = list(COMMANDS)
        return sorted(super().list_commands(ctx), key=lambda name: order.index(name) if name in order else len(order))

    def invoke(self, ctx: Any) -> Any:
        """Run the command: an exception that escapes it ends as one line and exit status 2 or 1, its traceback
        shown only with ``--debug`` or ``SPACY_ELMO_DEBUG=1`` (click's usage errors and exits pass unchanged)."""
        try:
            return super().invoke(ctx)
        except Exception as err:
            if passes_through(err) or ctx.params.get("debug") or debug_from_env():
                raise
            say_and_exit(err, ctx.invoked_subcommand or ctx.info_name or "spacy-elmo")


class _Command(TyperCommand):
    """A command whose arguments are spelled as usage lines spell them: ``embed [OPTIONS] INPUT_FILE OUTPUT_FILE``,
    upper case, optional ones in brackets (typer writes required ones as ``{input_file}``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            if isinstance(param, TyperArgument) and param.metavar is None and param.name:
                param.metavar = param.name.upper()

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [piece[1:].replace("}", "", 1) if piece.startswith("{") else piece for piece in pieces]


app = typer.Typer(
    name="spacy-elmo",
    cls=_Commands,
    help=(
        "ELMo contextual word vectors for spaCy and scikit-learn: embed text files, train, evaluate and inspect biLMs."
    ),
    epilog=_examples(("spacy-elmo embed sentences.txt vectors.hdf5", "spacy-elmo embed --help")),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # a --debug traceback: the frames, not every value they hold
    rich_markup_mode=None,  # help texts are plain: rich markup would swallow "spacy-elmo[dask]" as a tag
)


def _print_version(value: bool) -> None:
    if value:
        from .about import __version__

        typer.echo(f"spacy-elmo {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
    ),
    debug: bool = typer.Option(
        False,
        "--debug",
        help=f"On an unexpected error, show its full traceback instead of one line (also {DEBUG_ENV}=1)",
    ),
) -> None:
    """ELMo contextual word vectors for spaCy and scikit-learn."""


def _require_inputs(*paths: Path) -> None:
    """Say a missing input file at once, before a model loads or any work starts (``-`` is standard input)."""
    for path in paths:
        if str(path) != "-" and not path.exists():
            raise FileNotFoundError(f"input file {path} does not exist")


_TRAIN_DEFAULTS = TrainConfig(train=[])  # the training defaults prepare-corpus and adapt share
_DEVICE_HELP = "cpu, cuda, cuda:N, or auto (CUDA when torch sees a GPU, else the CPU)"
# the TrainConfig fields that are `spacy-elmo train` options (train, valid and corpus: the command's own sources)
_CONFIG_OPTIONS = {field.name: field for field in dataclasses.fields(TrainConfig) if "help" in field.metadata}


def _config_option(name: str, shown: Callable[[Any], Any] = lambda default: default) -> Any:
    """The ``spacy-elmo train`` option of TrainConfig's field ``name``: the field's flags, help and default
    (``shown``: the default as the option spells it, where the option is text)."""
    config_field = _CONFIG_OPTIONS[name]
    return typer.Option(shown(config_field.default), *option_flags(config_field), help=config_field.metadata["help"])


@app.command()
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
    from .runtime.configuration.validation import positive_int, process_count
    from .train.command_config import command_config

    with _errors_exit_2():  # the sources and every option's value, checked before torch is imported
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
    from .train.launch import TrainRun, run_training

    run = TrainRun(config, output_dir, _errors_exit_2, resume=resume, overwrite=overwrite, progress=progress)
    status = run_training(run, processes, device)
    if status:
        raise typer.Exit(status)


@app.command("prepare-corpus")
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

    from .train.layouts import check_layout

    with _errors_exit_2():  # the arguments, checked before torch is imported
        _require_inputs(*sources)
        check_layout(layout)
    from .train.prepare import SourceSpec, read_source_info
    from .train.prepare import prepare_corpus as run_prepare
    from .train.recorded_paths import recorded_command

    with _errors_exit_2():
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


@app.command()
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
    from .sources.model_names import require_model

    with _errors_exit_2():
        _require_inputs(train_docs, dev_docs)
        require_model(init_from)
    from .bilm.threads import set_process_threads
    from .spacy.adapt import AdaptOptions
    from .spacy.adapt import adapt as run_adapt
    from .train.allocator import keep_freed_memory

    with _errors_exit_2():
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


@app.command()
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
    from .output.checks import check_output_path
    from .sources.model_names import require_model
    from .train.corpus import make_sources

    with _errors_exit_2():  # the arguments, checked before torch is imported
        _require_inputs(*text_files)
        make_sources(text_files, "raw" if raw else "lines", tokenizer)  # (the tokenizer's name)
        for model in (model_dir, *shared_vocab):
            require_model(model)
        if output:
            check_output_path(output)
    from .train.evaluation import evaluate_files, record_result

    with _errors_exit_2():
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
        from .groundwork.atomic_write import write_text_atomically

        write_text_atomically(output, json.dumps(result, indent=2) + "\n")  # never a half-written file
    if record:
        with _errors_exit_2():
            record_result(model_dir, record, result)


@app.command()
def embed(
    input_file: Path = typer.Argument(
        ..., help="Text, one sentence per line (already tokenized, unless --tokenizer spacy)"
    ),
    output_file: Path = typer.Argument(..., help="HDF5 file to write (it appears only when complete)"),
    model: str = typer.Option(
        "default",
        "--model",
        "-m",
        help=(
            "A biLM: a directory (options.json + weights, or an ELMoForManyLangs model), 'default', a published name "
            "(see `spacy-elmo models`), an archive or URL"
        ),
    ),
    all_layers: bool = typer.Option(
        False, "--all", help="Store every layer, (n_layers + 1, n_tokens, dim) per line (the default)"
    ),
    top: bool = typer.Option(False, "--top", help="Store the top layer only, (n_tokens, dim)"),
    average: bool = typer.Option(False, "--average", help="Store the average of all layers, (n_tokens, dim)"),
    batch_size: int = typer.Option(
        DEFAULT_BATCH_SIZE, help="Sentences per batch (also bounded by a padded-token budget)"
    ),
    tokenizer: str = typer.Option("whitespace", help="whitespace (split on spaces) or spacy (spaCy's English rules)"),
    device: Optional[str] = typer.Option(None, help="torch device, e.g. cuda or cuda:1 (default: CPU)"),
    dtype: str = typer.Option(
        DEFAULT_DTYPE,
        help=dtype_help(),
    ),
    use_sentence_keys: bool = typer.Option(
        False,
        "--use-sentence-keys",
        help=(
            "Name each dataset by its sentence instead of its line number (every line must then be a distinct, "
            "non-blank sentence)"
        ),
    ),
    forget_sentences: bool = typer.Option(False, "--forget-sentences", help="Do not store the sentence_to_index map"),
    progress: bool = typer.Option(True, help="Show a tqdm progress bar"),
    scheduler: Optional[str] = typer.Option(
        None,
        help=(
            "Compute on a Dask cluster: a scheduler address (tcp://HOST:8786) or local:N (N worker processes here); "
            "needs the [dask] extra"
        ),
    ),
    threads: Optional[int] = typer.Option(
        None, min=1, help="torch CPU threads for this process (default: torch's choice)"
    ),
) -> None:
    """Embed every line of a text file into HDF5 (the layout of AllenNLP's `allennlp elmo` command)."""
    from .output.checks import check_embed_arguments
    from .sources.model_names import require_model

    chosen = [name for name, flag in (("all", all_layers), ("top", top), ("average", average)) if flag]
    with _errors_exit_2():  # the arguments, checked before torch is imported
        _require_inputs(input_file)
        if len(chosen) > 1:
            raise ValueError(f"choose one of --all, --top and --average, not {' and '.join('--' + c for c in chosen)}")
        check_embed_arguments(output_file, dtype=dtype, batch_size=batch_size, tokenizer=tokenizer, scheduler=scheduler)
        require_model(model)  # after the options: a model name may only be checked where it is found
        cluster = _embed_chunks_on(scheduler)  # a missing [dask] extra is said before the model loads
    from .bilm.threads import set_process_threads
    from .output.embed_file import embed_model_file

    with _errors_exit_2():
        set_process_threads(threads)  # this command's own process: the user's --threads
        summary = embed_model_file(
            model,
            input_file,
            output_file,
            device=device,
            dtype=dtype,
            cluster=cluster,
            output_format=chosen[0] if chosen else "all",
            batch_size=batch_size,
            tokenizer=tokenizer,
            use_sentence_keys=use_sentence_keys,
            forget_sentences=forget_sentences,
            progress=progress,
        )
    if not summary["sentences"]:  # the file is still written, with no line's dataset (docs/cli.md)
        empty = "<stdin>" if str(input_file) == "-" else input_file
        typer.secho(f"warning: {empty} is empty: {output_file} holds no sentence", fg=typer.colors.YELLOW, err=True)
    typer.echo(
        f"wrote {output_file}: {summary['sentences']} sentences, {summary['tokens']} tokens "
        f"in {summary['seconds']:.1f} s"
    )


@app.command()
def info(
    model_dir: str = typer.Argument(
        "default", help="A model directory, 'default' (the bundled model), a published name, archive or URL"
    ),
) -> None:
    """Print a biLM's architecture, parameter count, training corpus and perplexities (a published model not yet
    downloaded: what the published table says, without downloading it)."""
    from .sources.model_names import require_model

    with _errors_exit_2():  # a model string that names nothing, said before torch is imported
        require_model(model_dir)
    from .sources.download import is_cached
    from .sources.info import describe, describe_published
    from .sources.model_paths import resolve_model_files
    from .sources.published import published_model

    entry = published_model(model_dir)
    if entry is not None and Path(model_dir).expanduser().is_dir():  # a local folder of that name wins
        entry = None
    if entry is not None and not all(is_cached(url) for url in entry.urls):
        typer.echo(describe_published(entry))
        return
    with _errors_exit_2():
        options_path, weights_path = resolve_model_files(model_dir)
        text = describe(options_path, weights_path)
    typer.echo(text)


@app.command()
def download(
    models: list[str] = typer.Argument(
        ..., help="Published model names (see `spacy-elmo models`), archive URLs or file URLs"
    ),
    force: bool = typer.Option(
        False, "--force", help="Drop what the cache holds of these models first, then fetch them again"
    ),
) -> None:
    """Fetch models into the download cache now (e.g. while building a container image), verified, once per machine."""
    from .sources.model_names import require_model

    with _errors_exit_2():  # a model string that names nothing, said before torch is imported
        for model in models:
            require_model(model)
    from .sources.download import cached_path, home, is_archive, is_url
    from .sources.model_paths import forget_cached, resolve_model_files
    from .sources.published import published_by_url

    with _errors_exit_2():
        for model in models:
            if force:
                for path in forget_cached(model):
                    typer.echo(f"removed {path}")
            if is_url(model) and not is_archive(model) and published_by_url(model) is None:
                where = cached_path(model)  # one file of a model that has no name
            else:
                where = resolve_model_files(model)[1].parent
            typer.echo(f"{model}: {where}")
    typer.echo(f"cache: {home()}")


@app.command()
def models() -> None:
    """List the models a name gives anywhere a model is named (the bundled `default` and the published ones), and
    whether each is cached."""
    from .sources.download import home, is_cached
    from .sources.model_table import model_lines

    for line in model_lines(is_cached):
        typer.echo(line)
    typer.echo(f"\nspacy-elmo info NAME: one model in full; cache: {home()} (SPACY_ELMO_HOME)")
    typer.echo("SPACY_ELMO_OFFLINE=1 keeps everything off the network")


@app.command()
def similarity(
    sentence_a: str = typer.Argument(..., help="The first sentence (split on spaces)"),
    sentence_b: str = typer.Argument(..., help="The second sentence (split on spaces)"),
    word: str = typer.Option(..., "--word", "-w", help="The word to compare (its first occurrence in each sentence)"),
    model: str = typer.Option(
        "default", "--model", "-m", help="A biLM: 'default', a published name, a directory, archive or URL"
    ),
    plot: Optional[Path] = typer.Option(
        None, "--plot", help="Also write a figure (per-layer bars + token heatmap), e.g. out.png"
    ),
) -> None:
    """Cosine similarity of one word in two sentences, per layer: what context does to ELMo's vectors."""
    from .sources.model_names import require_model

    figure = _figure_file(plot) if plot is not None else None  # before torch is imported and the model loads
    with _errors_exit_2():
        require_model(model)
    from .runtime.embedding.backend import load_bilm
    from .similarity import plot as plot_figure
    from .similarity import word_similarity

    with _errors_exit_2():
        result = word_similarity(load_bilm(model), sentence_a, sentence_b, word)
    typer.echo(result.table())
    if figure is not None:
        typer.echo(f"wrote {plot_figure(result, figure)}")


def _require_plotting() -> None:
    """A missing matplotlib said in one line (exit 2) before a model or pipeline loads, naming the extra."""
    from .similarity import check_plotting

    try:
        check_plotting()
    except ImportError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from err


def _figure_file(path: Path) -> Path:
    """The file a figure argument gives (``bank`` -> ``bank.png``, as matplotlib names it), checked before a model or
    pipeline loads: matplotlib installed, a format it writes, a folder that takes the file (one line and exit 2)."""
    from .output.checks import check_output_path
    from .similarity import figure_file

    _require_plotting()
    with _errors_exit_2():
        written, _ = figure_file(path)
        check_output_path(written)
    return written


@app.command("plot-mix")
def plot_mix(
    pipeline: Path = typer.Argument(..., help="A trained spaCy pipeline directory (e.g. training/model-best)"),
    output: Path = typer.Argument(..., help="The figure to write, e.g. mix.png"),
) -> None:
    """Bar chart of the layer weights and gamma that each ElmoScalarMix in a trained pipeline learned."""
    with _errors_exit_2():  # the arguments, checked before spaCy is imported
        _require_inputs(pipeline)
        if not pipeline.is_dir():
            raise NotADirectoryError(f"{pipeline} is not a directory: give a trained spaCy pipeline's directory")
    figure = _figure_file(output)
    from .similarity import plot_mixes
    from .spacy.mix_layer import trained_mixes

    with _errors_exit_2():
        mixes = trained_mixes(pipeline)
    for name, (weights, gamma) in mixes.items():
        typer.echo(f"{name}: weights {' / '.join(f'{w:.3f}' for w in weights)}, gamma {gamma:.3f}")
    written = plot_mixes(mixes, figure, title=f"ELMo layer weights learned in {pipeline.parent.name}/{pipeline.name}")
    typer.echo(f"wrote {written}")


@app.command(
    "allennlp-elmo",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def allennlp_elmo(ctx: typer.Context) -> None:
    """AllenNLP 0.9's `allennlp elmo INPUT OUTPUT (--all|--top|--average) ...`, the same arguments and file (--help for
    them)."""
    from .compat.allennlp import ConfigurationError
    from .compat.allennlp.command import main as allennlp_main

    with _errors_exit_2():
        try:
            allennlp_main(prog="spacy-elmo allennlp-elmo", argv=list(ctx.args))
        except ConfigurationError as err:  # AllenNLP's error type (a blank line...): one line here, as everywhere
            raise ValueError(err.message) from err
        finally:
            sys.stderr.flush()  # argparse's usage error, written unflushed, out before the exit


for _info in app.registered_commands:  # each command's summary, examples and usage line, from COMMANDS
    _name = _info.name or typer.main.get_command_name(getattr(_info.callback, "__name__", ""))
    _info.short_help, _lines = COMMANDS[_name]
    _info.epilog = _examples(_lines) if _lines else None
    _info.cls = _Command if _info.cls in (None, TyperCommand) else _info.cls


def main() -> None:
    app()


def _embed_chunks_on(scheduler: Optional[str]) -> Optional[ClusterSetUp]:
    """``embed --scheduler``'s set-up: :func:`spacy_elmo.output.cluster.embed_chunks_on` the cluster it names, its
    dashboard said on stderr (no scheduler: None, this process computes)."""
    if scheduler is None:
        return None
    from .about import install_extra

    try:
        from .output.cluster import embed_chunks_on
    except ImportError as err:  # the message names the extra to install
        raise ValueError(f"--scheduler {scheduler}: {err}: {install_extra('dask')}") from err
    return functools.partial(embed_chunks_on, scheduler, say=functools.partial(typer.echo, err=True))


if __name__ == "__main__":  # last: every function above must exist when the command runs
    main()
