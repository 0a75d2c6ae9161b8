"""cli.py parses and delegates (ARCHITECTURE.md, "Module map"): a command checks its arguments and hands the work to
the group that does it, so no command's body runs long and the command line imports no library to do work itself."""

import ast
import importlib.util

from tests.architecture.arch_scan import MODULES, imported_names

MAX_BODY_LINES = 40  # a command's body after its docstring: its imports, checks, one call per step, what it says
# what the command line imports besides the standard library and spacy_elmo: typer, and torch for --threads (the
# user's thread count, set by the command's own process; tests/architecture/test_process_state.py)
CLI_LIBRARIES = {"typer", "torch"}


def command_bodies(source: str) -> dict[str, int]:
    """The lines of each ``@app.command`` function's body after its docstring, by function name."""
    lengths = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
        if not any(isinstance(d, ast.Attribute) and d.attr == "command" for d in decorators):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None else node.body
        lengths[node.name] = body[-1].end_lineno - body[0].lineno + 1 if body else 0
    return lengths


def test_the_count_sees_commands_and_only_their_bodies():
    """Guards the rule below against passing because it counts nothing."""
    source = (
        "@app.command()\ndef short():\n    '''Doc\n\n    string.'''\n    check()\n    run()\n\n\n"
        "@app.command('long-one')\ndef long_one():\n" + "    step()\n" * 50 + "\n\ndef helper():\n" + "    x()\n" * 60
    )
    assert command_bodies(source) == {"short": 2, "long_one": 50}
    assert {"train", "embed", "evaluate", "plot_mix"} <= set(command_bodies(MODULES["spacy_elmo.cli"].read_text()))


def test_no_command_holds_the_work_itself():
    """train, embed, evaluate and plot-mix held their groups' work (building a TrainConfig, loading the model for
    embed_file, choosing evaluate's model names, loading a pipeline and collecting its mixes): 31 to 45 lines each."""
    lengths = command_bodies(MODULES["spacy_elmo.cli"].read_text(encoding="utf-8"))
    long = {name: lines for name, lines in lengths.items() if lines > MAX_BODY_LINES}
    assert not long, f"commands whose work belongs to their group (lines of body, at most {MAX_BODY_LINES}): {long}"


def installed(module: str) -> bool:
    """Whether ``module`` is an installed package (site-packages), not the standard library's or this package's."""
    spec = importlib.util.find_spec(module)
    origin = (spec.origin or "") if spec is not None else ""
    return "site-packages" in origin or "dist-packages" in origin


def test_the_command_line_imports_no_library_to_work_with():
    """plot-mix imported spaCy to load the pipeline itself; the groups import what they work with."""
    outside = {name.split(".")[0] for name in imported_names("spacy_elmo.cli", in_functions=True)}
    outside = {name for name in outside if name != "spacy_elmo" and installed(name)}
    assert "typer" in outside and not installed("json"), "the check sees the command line's imports"
    assert outside <= CLI_LIBRARIES, f"cli.py imports {sorted(outside - CLI_LIBRARIES)}: move that work to its group"
