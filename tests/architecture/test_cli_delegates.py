"""The command line parses and delegates (ARCHITECTURE.md, "Module map"): a command checks its arguments and hands
the work to the group that does it, so no command's body runs long and the command line imports no library to do
work itself."""

import ast
import importlib.util

from tests.architecture.arch_scan import MODULES, imported_names

MAX_BODY_LINES = 40  # a command's body after its docstring: its imports, checks, one call per step, what it says
# what the command line imports besides the standard library and spacy_elmo: typer (and click, which an older typer
# runs on: the error boundary's ClickException), and torch for --threads (the user's thread count, set by the
# command's own process; tests/architecture/test_process_state.py)
CLI_LIBRARIES = {"typer", "click", "torch"}
# the modules of the command line: the package spacy_elmo.cli and every module in it
CLI_MODULES = sorted(name for name in MODULES if name == "spacy_elmo.cli" or name.startswith("spacy_elmo.cli."))


def is_command_decorator(decorator: ast.expr) -> bool:
    """``@app.command(...)`` or ``@command(...)`` (the command line's own registering decorator)."""
    called = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(called, ast.Attribute):
        return called.attr == "command"
    return isinstance(called, ast.Name) and called.id == "command"


def command_bodies(source: str) -> dict[str, int]:
    """The lines of each command function's body after its docstring, by function name."""
    lengths = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef) or not any(map(is_command_decorator, node.decorator_list)):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        lengths[node.name] = body[-1].end_lineno - body[0].lineno + 1 if body else 0
    return lengths


def all_command_bodies() -> dict[str, int]:
    """:func:`command_bodies` of every module of the command line, by function name."""
    lengths: dict[str, int] = {}
    for name in CLI_MODULES:
        lengths.update(command_bodies(MODULES[name].read_text(encoding="utf-8")))
    return lengths


def test_the_count_sees_commands_and_only_their_bodies():
    """Guards the rule below against passing because it counts nothing."""
    source = (
        "@app.command()\ndef short():\n    '''Doc\n\n    string.'''\n    check()\n    run()\n\n\n"
        "@command('long-one')\ndef long_one():\n" + "    step()\n" * 50 + "\n\ndef helper():\n" + "    x()\n" * 60
    )
    assert command_bodies(source) == {"short": 2, "long_one": 50}
    assert {"train", "embed", "evaluate", "plot_mix", "info", "download"} <= set(all_command_bodies())


def test_no_command_holds_the_work_itself():
    """train, embed, evaluate and plot-mix held their groups' work (building a TrainConfig, loading the model for
    embed_file, choosing evaluate's model names, loading a pipeline and collecting its mixes): 31 to 45 lines each."""
    long = {name: lines for name, lines in all_command_bodies().items() if lines > MAX_BODY_LINES}
    assert not long, f"commands whose work belongs to their group (lines of body, at most {MAX_BODY_LINES}): {long}"


def installed(module: str) -> bool:
    """Whether ``module`` is an installed package (site-packages), not the standard library's or this package's."""
    spec = importlib.util.find_spec(module)
    origin = (spec.origin or "") if spec is not None else ""
    return "site-packages" in origin or "dist-packages" in origin


def test_the_command_line_imports_no_library_to_work_with():
    """plot-mix imported spaCy to load the pipeline itself; the groups import what they work with."""
    outside = set()
    for module in CLI_MODULES:
        outside |= {name.split(".")[0] for name in imported_names(module, in_functions=True)}
    outside = {name for name in outside if name != "spacy_elmo" and installed(name)}
    assert "typer" in outside and not installed("json"), "the check sees the command line's imports"
    assert outside <= CLI_LIBRARIES, f"the command line imports {sorted(outside - CLI_LIBRARIES)}: move that work"
