"""The typer app every command is registered on: its group (the commands listed in :data:`.help_text.COMMANDS`'
order, each run inside the one error boundary of :mod:`.errors`), its ``--version`` and ``--debug`` options, and
:func:`command`, the decorator that registers a command with its summary, examples and usage line."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from .errors import DEBUG_ENV, debug_from_env, passes_through, say_and_exit
from .help_text import APP_EXAMPLES, APP_HELP, COMMANDS, examples, listing_position

Function = TypeVar("Function", bound=Callable[..., Any])


class CommandGroup(TyperGroup):
    """The command group: its commands listed in :data:`.help_text.COMMANDS`' order, each run inside the one error
    boundary (:mod:`.errors`)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(super().list_commands(ctx), key=listing_position)

    def invoke(self, ctx: Any) -> Any:
        """Run the command: an exception that escapes it ends as one line and exit status 2 or 1, its traceback
        shown only with ``--debug`` or ``SPACY_ELMO_DEBUG=1`` (click's usage errors and exits pass unchanged)."""
        try:
            return super().invoke(ctx)
        except Exception as err:
            if passes_through(err) or ctx.params.get("debug") or debug_from_env():
                raise
            say_and_exit(err, ctx.invoked_subcommand or ctx.info_name or "spacy-elmo")


class UsageCommand(TyperCommand):
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
    cls=CommandGroup,
    help=APP_HELP,
    epilog=examples(APP_EXAMPLES),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # a --debug traceback: the frames, not every value they hold
    rich_markup_mode=None,  # help texts are plain: rich markup would swallow "spacy-elmo[dask]" as a tag
)


def command(name: str, **settings: Any) -> Callable[[Function], Function]:
    """Register the decorated function as the command ``name`` of :data:`app`, with its summary and examples from
    :data:`.help_text.COMMANDS` and its usage line spelled by :class:`UsageCommand` (``settings``: typer's own)."""
    summary, lines = COMMANDS[name]
    register: Callable[[Function], Function] = app.command(
        name, cls=UsageCommand, short_help=summary, epilog=examples(lines), **settings
    )
    return register


def _print_version(value: bool) -> None:
    if value:
        from ..about import __version__

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
