"""Every command, every option and argument, with hostile values: no traceback, exit 0 or 2, a refusal in one line.

The commands and their parameters are read from the typer app itself (a parameter's kind from its annotation), so a
command or option added later is covered without a change here: numbers get nan, 10**23, inf, -1, 0, 1e300 and "abc";
paths a missing file, a directory where a file belongs, an empty file and a file of binary junk; text "" and a
100 KB string. Each command starts from arguments that work (:data:`BASE`, bounded to one training step), and one
parameter at a time takes a hostile value.
"""

from __future__ import annotations

import os
import shutil
import time
import typing
from pathlib import Path
from typing import Any, Callable, Union

import pytest
import typer

from spacy_elmo.cli import app
from tests.conftest import cli_runner

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "allennlp_elmo"

NUMBERS = ["nan", "100000000000000000000000", "inf", "-1", "0", "1e300", "abc"]
TEXTS = ["", "x" * 100_000]
PATHS = ["missing.txt", "a_dir", "empty.txt", "junk.bin"]  # made in each case's folder (:func:`case_folder`)
# each parameter's first hostile value is always tried; the others until the test has run this long (a loaded
# machine tries fewer, not for longer)
BUDGET_S = 35
WORK_CPU_S = 10  # a case that takes this much CPU went to work on a hostile value instead of refusing it

# the arguments each command works with (its parameters by name; {model}, {docs} and {text}: made below; paths
# relative to the case's own folder); a command missing here gets a text file, "x" or 1 for each required parameter
BASE: dict[str, dict[str, Union[str, list[str]]]] = {
    "embed": {"input_file": "in.txt", "output_file": "out.hdf5", "model": str(FIXTURE), "progress": "--no-progress"},
    "info": {"model_dir": str(FIXTURE)},
    "models": {},
    "download": {"models": ["x"]},  # (offline: refused, as a name that names nothing)
    "export": {"model": str(FIXTURE), "output_dir": "out", "export_format": "onnx"},
    "similarity": {"sentence_a": "a b", "sentence_b": "b a", "word": "a", "model": str(FIXTURE)},
    "train": {
        "output_dir": "out",
        "train_files": ["in.txt"],
        "architecture": "tiny",
        "min_count": "1",
        "max_steps": "1",
        "token_budget": "256",
        "progress": "--no-progress",
    },
    "prepare-corpus": {"output_dir": "out", "sources": ["in.txt"], "progress": "--no-progress"},
    "evaluate": {"model_dir": "{model}", "text_files": ["in.txt"]},
    "adapt": {
        "output_dir": "out",
        "train_docs": "{docs}",
        "dev_docs": "{docs}",
        "init_from": "{model}",
        "max_steps": "1",
        "token_budget": "256",
        "progress": "--no-progress",
    },
    "plot-mix": {"pipeline": "a_dir", "output": "mix.png"},  # (an empty folder: refused, as no pipeline)
    "allennlp-elmo": {},  # its arguments are AllenNLP's own parser's: ALLENNLP below
}
# allennlp-elmo takes its arguments raw (AllenNLP's argparse): the working call, and each hostile one
ALLENNLP = ["in.txt", "out.hdf5", "--all", "--options-file", str(FIXTURE / "options.json")]
ALLENNLP_WEIGHTS = ["--weight-file", str(FIXTURE / "lm_weights.hdf5")]
ALLENNLP_HOSTILE = [
    ["missing.txt", "out.hdf5", "--all"],
    ["junk.bin", "out.hdf5", "--all"],
    ["a_dir", "out.hdf5", "--all"],
    ["in.txt", "a_dir", "--all"],
    ["in.txt", "out.hdf5", "--all", "--batch-size", "-1"],
    ["in.txt", "out.hdf5", "--all", "--cuda-device", "abc"],
]


def command_functions() -> dict[str, Callable[..., Any]]:
    """Each command of the app by name -> the function that defines it (its parameters' annotations)."""
    found = {}
    for info in app.registered_commands:
        function = info.callback
        assert function is not None
        found[info.name or typer.main.get_command_name(function.__name__)] = function
    return found


def kind_of(annotation: Any) -> tuple[str, bool]:
    """A parameter's kind (number, path, text, or skip for flags and the context) and whether it repeats."""
    if typing.get_origin(annotation) is Union:
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    repeated = typing.get_origin(annotation) is list
    if repeated:
        annotation = typing.get_args(annotation)[0]
    kinds = {int: "number", float: "number", Path: "path", str: "text"}
    return kinds.get(annotation, "skip"), repeated


def parameters(name: str) -> list[tuple[Any, str, bool]]:
    """``(click parameter, kind, repeated)`` of command ``name``, in its order."""
    command = typer.main.get_command(app).commands[name]
    hints = typing.get_type_hints(command_functions()[name])
    found = []
    for param in command.params:
        kind, repeated = kind_of(hints.get(param.name or "", bool))
        found.append((param, kind, repeated))
    return found


def hostile_values(kind: str) -> list[str]:
    return {"number": NUMBERS, "path": PATHS, "text": TEXTS}.get(kind, [])


def argv(name: str, values: dict[str, Union[str, list[str]]]) -> list[str]:
    """The command line of ``name`` with ``values`` by parameter name: options first, then ``--`` and the arguments
    (so a value such as ``-1`` is never read as an option); a flag's value is the flag itself."""
    options: list[str] = []
    arguments: list[str] = []
    for param, kind, _ in parameters(name):
        if param.name not in values:
            continue
        value = values[param.name]
        items = value if isinstance(value, list) else [value]
        if param.param_type_name == "argument":
            arguments += items
        elif kind == "skip":
            options += items
        else:
            options += [token for item in items for token in (param.opts[0], item)]
    return [name, *options, "--", *arguments]


def base_values(name: str) -> dict[str, Union[str, list[str]]]:
    """:data:`BASE`'s arguments of ``name``, or a working guess for each required parameter of a new command."""
    if name in BASE:
        return dict(BASE[name])
    guess = {"number": "1", "path": "in.txt", "text": "x"}
    return {
        param.name: [guess[kind]] if repeated else guess[kind]
        for param, kind, repeated in parameters(name)
        if param.required and kind in guess
    }


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A trained tiny biLM with its softmax ({model}) and a .spacy file of docs ({docs}), made once."""
    root = tmp_path_factory.mktemp("made")
    text = root / "text.txt"
    text.write_text("".join(f"the cat sat on the mat {i}\na dog ran in the park\n" for i in range(20)), "utf-8")
    result = cli_runner().invoke(
        app,
        ["train", str(root / "model"), "--train", str(text), "--arch", "tiny", "--max-steps", "1", "--no-progress"],
    )
    assert result.exit_code == 0, result.output
    import spacy
    from spacy.tokens import DocBin

    nlp = spacy.blank("en")
    DocBin(docs=[nlp("the cat sat on the mat"), nlp("a dog ran in the park")]).to_disk(root / "docs.spacy")
    return {"model": root / "model", "docs": root / "docs.spacy"}


def case_folder(root: Path, made: dict[str, Path], name: str) -> Path:
    """A fresh folder holding the files a case's paths name: in.txt, an empty file, binary junk, an empty folder, and
    its own copy of the trained model (evaluate --record writes into the model it evaluates)."""
    folder = Path(os.path.join(root, f"case{len(os.listdir(root))}"))
    folder.mkdir()
    (folder / "in.txt").write_text("the cat sat on the mat\na dog ran\n", encoding="utf-8")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "junk.bin").write_bytes(bytes(range(256)) * 8 + b"\xff\xfe\x00\x80")
    (folder / "a_dir").mkdir()
    if name in ("evaluate", "adapt"):
        shutil.copytree(made["model"], folder / "model")
    return folder


def placed(values: dict[str, Union[str, list[str]]], made: dict[str, Path]) -> dict[str, Union[str, list[str]]]:
    fill = {"{model}": "model", "{docs}": str(made["docs"])}
    return {k: [fill.get(x, x) for x in v] if isinstance(v, list) else fill.get(v, v) for k, v in values.items()}


def cases() -> list[tuple[int, str, str, str]]:
    """``(round, command, parameter, hostile value)`` for every command and parameter of the app, ``(0, command, "",
    "")`` being the command's working call: round 0 holds each parameter's first hostile value, round ``k`` its
    ``k``-th value, so that a run cut short by :data:`BUDGET_S` has tried every parameter once."""
    found = []
    for name in typer.main.get_command(app).commands:
        found.append((0, name, "", ""))
        for param, kind, _ in parameters(name):
            found += [(k, name, param.name, value) for k, value in enumerate(hostile_values(kind))]
    found += [(k, "allennlp-elmo", "argv", " ".join(args)) for k, args in enumerate(ALLENNLP_HOSTILE)]
    return sorted(found, key=lambda case: case[0])


def check(result, what: str) -> None:
    """No traceback, exit 0 or 2; a refusal of ours in one stderr line (click's usage errors keep their form)."""
    text = result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), f"{what}: {result.exception!r}"
    assert "Traceback" not in text, f"{what}: {text[-2000:]}"
    assert result.exit_code in (0, 2), f"{what}: exit {result.exit_code}: {result.stderr[-2000:]}"
    if result.exit_code == 2 and "Usage: " not in text and "usage: " not in text:  # (allennlp-elmo: argparse's)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), f"{what}: {lines}"


def test_the_base_calls_name_real_commands_and_parameters():
    """Guards the table above against going stale: each of its commands and parameter names exists, and the kinds
    are read (a typo would make a hostile value land nowhere)."""
    commands = typer.main.get_command(app).commands
    assert set(BASE) == set(commands)
    for name, values in BASE.items():
        assert set(values) <= {param.name for param, _, _ in parameters(name)}, name
    kinds = {param.name: kind for param, kind, _ in parameters("train")}
    assert kinds["lr"] == "number" and kinds["train_files"] == "path" and kinds["device"] == "text"
    assert kinds["resume"] == "skip" and sum(1 for case in cases() if case[1] == "train") > 100


def test_every_command_takes_hostile_values_without_a_traceback(made, tmp_path, monkeypatch):
    """One test for all cases (a parametrized test per case costs more than the cases themselves); the failures
    are collected and said together."""
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")  # nothing here may reach the network
    monkeypatch.setenv("SPACY_ELMO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    runner = cli_runner()
    failures, slow, skipped = [], [], 0
    later_rounds_until = time.perf_counter() + BUDGET_S
    for round_, name, param, value in cases():
        if round_ and time.perf_counter() > later_rounds_until:
            skipped += 1
            continue
        folder = case_folder(tmp_path, made, name)
        monkeypatch.chdir(folder)
        if name == "allennlp-elmo":
            args = [name, *(value.split() if param else ALLENNLP), *ALLENNLP_WEIGHTS]
        else:
            values = placed(base_values(name), made)
            if param:
                repeated = next(r for p, _, r in parameters(name) if p.name == param)
                values[param] = [value] if repeated else value
            args = argv(name, values)
        cpu = time.process_time()
        result = runner.invoke(app, args)
        cpu = time.process_time() - cpu
        what = f"spacy-elmo {' '.join(a if len(a) < 80 else a[:20] + '...' for a in args)}"
        try:
            check(result, what)
            if not param:
                assert result.exit_code == (2 if name in ("download", "plot-mix") else 0), f"{what}: {result.output}"
        except AssertionError as err:
            failures.append(str(err))
        if cpu > WORK_CPU_S:
            slow.append(f"{what}: {cpu:.1f} s of CPU")
    print(f"{skipped} hostile values left untried: the run took more than {BUDGET_S} s")
    assert not failures, "\n".join(failures)
    assert not slow, "hostile values that went to work instead of being refused:\n" + "\n".join(slow)
