"""The commands that compute or show ELMo vectors: ``embed`` (a text file into HDF5), ``allennlp-elmo`` (AllenNLP's
command), ``similarity`` (one word in two sentences, per layer) and ``plot-mix`` (the layer weights a spaCy pipeline
learned). Each checks its arguments before torch or spaCy is imported (a figure's file and matplotlib too), then
hands the work to output/, compat/, similarity and spacy/, and the drawing to plots."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..bilm.engine.precisions import precision_help
from ..runtime.configuration.defaults import DEFAULT_BATCH_SIZE, DEFAULT_PRECISION
from .errors import errors_exit_2
from .input_files import require_inputs
from .typer_app import command

if TYPE_CHECKING:  # pragma: no cover
    from ..output.embed_file import ClusterSetUp


@command("embed")
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
    precision: str = typer.Option(DEFAULT_PRECISION, "--precision", help=precision_help()),
    dtype: Optional[str] = typer.Option(None, "--dtype", hidden=True, help="Deprecated: --precision"),
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
    from ..output.argument_checks import check_embed_arguments
    from ..sources.model_names import require_model

    chosen = [name for name, flag in (("all", all_layers), ("top", top), ("average", average)) if flag]
    with errors_exit_2():  # the arguments, checked before torch is imported
        require_inputs(input_file)
        precision = check_embed_arguments(
            output_file,
            precision,
            dtype,
            formats=chosen,
            batch_size=batch_size,
            tokenizer=tokenizer,
            scheduler=scheduler,
        )
        require_model(model)  # after the options: a model name may only be checked where it is found
        cluster = _embed_chunks_on(scheduler)  # a missing [dask] extra is said before the model loads
    from ..bilm.threads import set_process_threads
    from ..output.embed_file import embed_model_file

    with errors_exit_2():
        set_process_threads(threads)  # this command's own process: the user's --threads
        summary = embed_model_file(
            model,
            input_file,
            output_file,
            device=device,
            dtype=precision,
            cluster=cluster,
            output_format=chosen[0] if chosen else "all",
            batch_size=batch_size,
            tokenizer=tokenizer,
            use_sentence_keys=use_sentence_keys,
            forget_sentences=forget_sentences,
            progress=progress,
        )
    _say_written(summary, input_file, output_file)


def _say_written(summary: dict, input_file: Path, output_file: Path) -> None:
    """``embed``'s last lines: what it wrote, and a warning when the input held no line."""
    if not summary["sentences"]:  # the file is still written, with no line's dataset (docs/cli.md)
        empty = "<stdin>" if str(input_file) == "-" else input_file
        typer.secho(f"warning: {empty} is empty: {output_file} holds no sentence", fg=typer.colors.YELLOW, err=True)
    typer.echo(
        f"wrote {output_file}: {summary['sentences']} sentences, {summary['tokens']} tokens "
        f"in {summary['seconds']:.1f} s"
    )


@command("similarity")
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
    from ..sources.model_names import require_model

    figure = _figure_file(plot) if plot is not None else None  # before torch is imported and the model loads
    with errors_exit_2():
        require_model(model)
    from ..runtime.embedding.backend import load_bilm
    from ..similarity import plot as plot_figure
    from ..similarity import word_similarity

    with errors_exit_2():
        result = word_similarity(load_bilm(model), sentence_a, sentence_b, word)
    typer.echo(result.table())
    if figure is not None:
        typer.echo(f"wrote {plot_figure(result, figure)}")


def _require_plotting() -> None:
    """A missing matplotlib said in one line (exit 2) before a model or pipeline loads, naming the extra."""
    from ..plots import check_plotting

    try:
        check_plotting()
    except ImportError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from err


def _figure_file(path: Path) -> Path:
    """The file a figure argument gives (``bank`` -> ``bank.png``, as matplotlib names it), checked before a model or
    pipeline loads: matplotlib installed, a format it writes, a folder that takes the file (one line and exit 2)."""
    from ..output.argument_checks import check_output_path
    from ..plots import figure_file

    _require_plotting()
    with errors_exit_2():
        written, _ = figure_file(path)
        check_output_path(written)
    return written


@command("plot-mix")
def plot_mix(
    pipeline: Path = typer.Argument(..., help="A trained spaCy pipeline directory (e.g. training/model-best)"),
    output: Path = typer.Argument(..., help="The figure to write, e.g. mix.png"),
) -> None:
    """Bar chart of the layer weights and gamma that each ElmoScalarMix in a trained pipeline learned."""
    with errors_exit_2():  # the arguments, checked before spaCy is imported
        require_inputs(pipeline)
        if not pipeline.is_dir():
            raise NotADirectoryError(f"{pipeline} is not a directory: give a trained spaCy pipeline's directory")
    figure = _figure_file(output)
    from ..plots import plot_mixes
    from ..spacy.mix_layer import trained_mixes

    with errors_exit_2():
        mixes = trained_mixes(pipeline)
    for name, (weights, gamma) in mixes.items():
        typer.echo(f"{name}: weights {' / '.join(f'{w:.3f}' for w in weights)}, gamma {gamma:.3f}")
    written = plot_mixes(mixes, figure, title=f"ELMo layer weights learned in {pipeline.parent.name}/{pipeline.name}")
    typer.echo(f"wrote {written}")


@command(
    "allennlp-elmo",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def allennlp_elmo(ctx: typer.Context) -> None:
    """AllenNLP 0.9's `allennlp elmo INPUT OUTPUT (--all|--top|--average) ...`, the same arguments and file (--help for
    them)."""
    from ..compat.allennlp import ConfigurationError
    from ..compat.allennlp.command import main as allennlp_main

    with errors_exit_2():
        try:
            allennlp_main(prog="spacy-elmo allennlp-elmo", argv=list(ctx.args))
        except ConfigurationError as err:  # AllenNLP's error type (a blank line...): one line here, as everywhere
            raise ValueError(err.message) from err
        finally:
            sys.stderr.flush()  # argparse's usage error, written unflushed, out before the exit


def _embed_chunks_on(scheduler: Optional[str]) -> Optional[ClusterSetUp]:
    """``embed --scheduler``'s set-up: :func:`spacy_elmo.output.cluster.embed_chunks_on` the cluster it names, its
    dashboard said on stderr (no scheduler: None, this process computes)."""
    if scheduler is None:
        return None
    from ..about import install_extra

    try:
        from ..output.cluster import embed_chunks_on
    except ImportError as err:  # the message names the extra to install
        raise ValueError(f"--scheduler {scheduler}: {err}: {install_extra('dask')}") from err
    return functools.partial(embed_chunks_on, scheduler, say=functools.partial(typer.echo, err=True))
