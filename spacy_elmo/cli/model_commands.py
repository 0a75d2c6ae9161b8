"""The commands about models: ``info`` (one model), ``models`` (every model a name gives), ``download`` (models
fetched into the cache ahead of use) and ``export`` (a model as ONNX graphs, to serve without torch). Each checks a
model string before torch is imported, then hands the work to sources/ and output/, and what it prints to
:mod:`.model_info` and :mod:`.model_table`."""

from __future__ import annotations

from pathlib import Path

import typer

from ..runtime.configuration.defaults import DEFAULT_PRECISION
from .errors import errors_exit_2
from .typer_app import command


@command("info")
def info(
    model_dir: str = typer.Argument(
        "default", help="A model directory, 'default' (the bundled model), a published name, archive or URL"
    ),
) -> None:
    """Print a biLM's architecture, parameter count, training corpus and perplexities (a published model not yet
    downloaded: what the published table says, without downloading it)."""
    from ..sources.model_names import require_model

    with errors_exit_2():  # a model string that names nothing, said before torch is imported
        require_model(model_dir)
    from .model_info import describe_model

    with errors_exit_2():
        text = describe_model(model_dir)
    typer.echo(text)


@command("download")
def download(
    models: list[str] = typer.Argument(
        ..., help="Published model names (see `spacy-elmo models`), archive URLs or file URLs"
    ),
    force: bool = typer.Option(
        False, "--force", help="Drop what the cache holds of these models first, then fetch them again"
    ),
) -> None:
    """Fetch models into the download cache now (e.g. while building a container image), verified, once per machine."""
    from ..sources.model_names import require_model

    with errors_exit_2():  # a model string that names nothing, said before torch is imported
        for model in models:
            require_model(model)
    from ..sources.download import home
    from ..sources.model_paths import download_model, forget_cached

    with errors_exit_2():
        for model in models:
            if force:
                for path in forget_cached(model):
                    typer.echo(f"removed {path}")
            typer.echo(f"{model}: {download_model(model)}")
    typer.echo(f"cache: {home()}")


@command("models")
def models() -> None:
    """List the models a name gives anywhere a model is named (the bundled `default` and the published ones), and
    whether each is cached."""
    from ..sources.download import home, is_cached
    from .model_table import model_lines

    for line in model_lines(is_cached):
        typer.echo(line)
    typer.echo(f"\nspacy-elmo info NAME: one model in full; cache: {home()} (SPACY_ELMO_HOME)")
    typer.echo("SPACY_ELMO_OFFLINE=1 keeps everything off the network")


EXPORT_FORMATS = ("onnx",)


@command("export")
def export(
    model: str = typer.Argument(
        ..., help="What to export: a model directory, 'default', a published name, archive or URL"
    ),
    output_dir: Path = typer.Argument(..., help="The folder to write (new or empty; it appears only when complete)"),
    export_format: str = typer.Option(
        "onnx", "--format", help="onnx: ONNX graphs for ONNX Runtime (torch-free serving)"
    ),
    precision: str = typer.Option(
        DEFAULT_PRECISION,
        "--precision",
        help="float32 (exact) or int8 (the products' weights in int8: faster on CPU, approximate; docs/serving.md)",
    ),
) -> None:
    """Export a biLM to ONNX, checked against the torch float32 path first: load_bilm, ElmoVectorizer and the spaCy
    component then run the folder on ONNX Runtime, without torch (docs/serving.md)."""
    from ..sources.model_names import require_model

    with errors_exit_2():  # the arguments, said before torch is imported
        if export_format not in EXPORT_FORMATS:
            raise ValueError(f"--format {export_format!r}: expected one of {list(EXPORT_FORMATS)}")
        require_model(model)
    from ..output.onnx_export import export_onnx

    with errors_exit_2():
        done = export_onnx(model, output_dir, precision=precision)
    typer.echo(
        f"wrote {done.folder} ({done.precision}): checked against the torch float32 path, largest difference "
        f"{done.max_relative_error:.2g} of a layer's scale"
    )
