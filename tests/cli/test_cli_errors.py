"""The command line's one error boundary: whatever a command raises ends as one line and exit status 2 (bad input,
the system's refusal) or 1 (a bug of ours, said as one), never a traceback unless ``--debug`` or
``SPACY_ELMO_DEBUG=1`` asks for it; click's usage errors and a closed pipe end as they always have."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spacy_elmo.cli import app
from spacy_elmo.cli.errors import MAX_LINE_CHARS, one_line
from tests.conftest import cli_runner

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "allennlp_elmo"
DEFAULT = ROOT / "spacy_elmo" / "models" / "default"


def said_lines(result) -> list[str]:
    """The non-blank lines a command said on stderr."""
    return [line for line in result.stderr.splitlines() if line.strip()]


def assert_one_line(result, status: int, *parts: str) -> str:
    """``result`` ended with exit ``status`` and one stderr line holding ``parts``, no traceback anywhere."""
    lines = said_lines(result)
    assert result.exit_code == status, (result.exit_code, result.output, result.stderr)
    assert "Traceback" not in result.output + result.stderr and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and all(part in lines[0] for part in parts), lines[0]
    return lines[0]


# -- in-process: any exception a command raises ------------------------------------------------------------------


def test_an_unexpected_exception_is_one_line_saying_it_is_a_bug(monkeypatch):
    """A fault of ours (here an injected RuntimeError) is exit 1, one line naming the command and the exception, how
    to see the traceback and that it is a bug to report."""
    import spacy_elmo.cli.model_table as model_table

    def broken(*args, **kwargs):
        raise RuntimeError("injected\nover two lines")

    monkeypatch.setattr(model_table, "model_lines", broken)
    line = assert_one_line(cli_runner().invoke(app, ["models"]), 1, "spacy-elmo models failed: RuntimeError: injected")
    assert "over two lines" in line and "--debug" in line and "SPACY_ELMO_DEBUG=1" in line and "bug" in line


def test_debug_lets_the_exception_through(monkeypatch):
    import spacy_elmo.cli.model_table as model_table

    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(model_table, "model_lines", broken)
    result = cli_runner().invoke(app, ["--debug", "models"])
    assert isinstance(result.exception, RuntimeError) and "injected" in str(result.exception)


def softmax_with_div_value_0(folder: Path) -> Path:
    """A copy of the bundled model whose softmax.safetensors header says div_value 0."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    shutil.copytree(DEFAULT, folder)
    with safe_open(str(folder / "softmax.safetensors"), "np") as read:
        metadata = dict(read.metadata())
        tensors = {name: read.get_tensor(name) for name in read.keys()}  # noqa: SIM118 (safe_open has no __iter__)
    header = json.loads(metadata["json"])
    header["div_value"] = 0
    metadata["json"] = json.dumps(header)
    save_file(tensors, str(folder / "softmax.safetensors"), metadata)
    return folder


@pytest.mark.parametrize("command", ["evaluate", "train"])
def test_a_softmax_with_div_value_0_is_one_line(command, tmp_path):
    """Ended in a ZeroDivisionError traceback (evaluate, train --init-from)."""
    model = softmax_with_div_value_0(tmp_path / "model")
    text = tmp_path / "in.txt"
    text.write_text("the bank of the river\n", encoding="utf-8")
    args = {
        "evaluate": ["evaluate", str(model), str(text)],
        "train": ["train", str(tmp_path / "out"), "--train", str(text), "--init-from", str(model), "--max-steps", "1"],
    }[command]
    result = cli_runner().invoke(app, [*args, "--no-progress"] if command == "train" else args)
    assert_one_line(result, 2, "softmax.safetensors", "div_value")  # the user's file, refused by its schema


def test_a_cache_size_of_inf_is_one_line(fixture_dir, tmp_path, monkeypatch):
    """SPACY_ELMO_CACHE_MB=inf ended in an OverflowError traceback."""
    monkeypatch.setenv("SPACY_ELMO_CACHE_MB", "inf")
    monkeypatch.setattr(
        "spacy_elmo.runtime.embedding.backend._CACHE", {}
    )  # a fresh process's: the variable is read at load
    monkeypatch.setenv("SPACY_ELMO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    args = ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", str(fixture_dir)]
    result = cli_runner().invoke(app, [*args, "--no-progress"])
    assert_one_line(result, 2, "SPACY_ELMO_CACHE_MB=inf")
    assert not (tmp_path / "out.hdf5").exists()


@pytest.mark.parametrize(
    "args, said",
    [
        (["embed", "in.txt", "out.hdf5", "--tokenizer", "x" * 100_000], "tokenizer='xxx"),
        (["train", "out", "--train", "in.txt", "--arch", "x" * 100_000], "unknown architecture 'xxx"),
    ],
    ids=["tokenizer", "arch"],
)
def test_a_name_too_long_for_a_path_is_said_as_the_value_it_is(args, said, tmp_path, monkeypatch):
    """A 100 KB --tokenizer or --arch was looked up as a file: an OSError (file name too long), no value named."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    assert_one_line(cli_runner().invoke(app, args), 2, said, "(100,000 characters)")


def test_usage_errors_are_clicks_own(tmp_path):
    result = cli_runner().invoke(app, ["embed", "--no-such-option"])
    said = result.output + result.stderr  # (click 8.2+ shows stderr in output too; 8.1 keeps it apart)
    assert result.exit_code == 2 and "No such option: --no-such-option" in said
    assert "Usage: " in said and "Traceback" not in said


def test_one_line_joins_lines_and_bounds_a_long_message():
    assert one_line("first\n  second\n\nthird ") == "first second third"
    long = one_line("x" * 100_000 + "; do this")
    assert len(long) <= MAX_LINE_CHARS and long.endswith("; do this") and " ... " in long


# -- figures: the format checked before any model loads, the file written said ---------------------------------


def test_a_figure_format_matplotlib_lacks_is_said_before_the_model_loads(tmp_path, monkeypatch):
    """similarity --plot out.xyz and plot-mix ... mix.xyz ended in a 70-line traceback after the work was done."""
    import spacy_elmo.runtime.embedding.backend as backend
    import spacy_elmo.spacy.mix_layer as mix_layer

    def never(*args, **kwargs):
        raise AssertionError("the model or pipeline loaded before the figure's format was checked")

    monkeypatch.setattr(backend, "load_bilm", never)
    monkeypatch.setattr(mix_layer, "trained_mixes", never)
    out = tmp_path / "out.xyz"
    similarity = ["similarity", "a b", "b a", "--word", "a", "--model", str(FIXTURE), "--plot", str(out)]
    for args in (similarity, ["plot-mix", str(tmp_path), str(out)]):
        line = assert_one_line(cli_runner().invoke(app, args), 2, "out.xyz", "matplotlib writes no 'xyz' format")
        assert ".png" in line and ".svg" in line
    assert not out.exists()


def test_a_figure_without_a_suffix_says_the_file_it_wrote(tmp_path, monkeypatch):
    """--plot bank said `wrote bank` while it wrote bank.png."""
    import spacy_elmo.spacy.mix_layer as mix_layer

    result = cli_runner().invoke(
        app, ["similarity", "a b", "b a", "--word", "a", "--model", str(FIXTURE), "--plot", str(tmp_path / "bank")]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"wrote {tmp_path / 'bank.png'}" and (tmp_path / "bank.png").is_file()
    monkeypatch.setattr(mix_layer, "trained_mixes", lambda pipeline: {"elmo": ([0.2, 0.3, 0.5], 1.0)})
    result = cli_runner().invoke(app, ["plot-mix", str(tmp_path), str(tmp_path / "mix")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"wrote {tmp_path / 'mix.png'}" and (tmp_path / "mix.png").is_file()


# -- in a process of its own: standard output, the debug switches, a closed pipe -----------------------------------

# runs the command line as `spacy-elmo` does, with the model table broken when BREAK is set (a bug of ours)
_RUNNER = (
    "import os, sys\n"
    "if os.environ.get('BREAK'):\n"
    "    import spacy_elmo.cli.model_table as table\n"
    "    def broken(*args, **kwargs):\n"
    "        raise RuntimeError('injected')\n"
    "    table.model_lines = broken\n"
    "from spacy_elmo.cli import app\n"
    "app(prog_name='spacy-elmo')\n"
)


def run(*args: str, cwd: Path, stdout=subprocess.PIPE, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _RUNNER, *args],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [
        ["info", "default"],
        ["similarity", "a b", "b a", "--word", "a", "--model", str(FIXTURE)],
        ["evaluate", "default", "in.txt"],
    ],
    ids=lambda args: args[0],
)
def test_standard_output_on_a_full_disk_is_one_line(args, tmp_path):
    """`> /dev/full` ended in a 14-line OSError traceback."""
    (tmp_path / "in.txt").write_text("the bank of the river\n", encoding="utf-8")
    with open("/dev/full", "w") as full:
        done = run(*args, cwd=tmp_path, stdout=full)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: spacy-elmo {args[0]}: cannot write to standard output: No space left"), lines


def test_a_bug_is_one_line_and_the_debug_switches_show_its_traceback(tmp_path):
    quiet = run("models", cwd=tmp_path, BREAK="1")
    assert quiet.returncode == 1 and quiet.stderr.count("\n") == 1 and "Traceback" not in quiet.stderr, quiet.stderr
    assert quiet.stderr.startswith("error: spacy-elmo models failed: RuntimeError: injected; this is a bug")
    for shown in (
        run("--debug", "models", cwd=tmp_path, BREAK="1"),
        run("models", cwd=tmp_path, BREAK="1", **{"SPACY_ELMO_DEBUG": "1"}),
    ):
        assert shown.returncode == 1 and "Traceback" in shown.stderr and "RuntimeError: injected" in shown.stderr


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`spacy-elmo models | head -0`: no message, exit 1 (click's own end for a closed pipe)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = run("models", cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == 1 and done.stderr == "", done.stderr


@pytest.mark.slow
def test_a_bug_in_a_training_process_is_one_line(tmp_path):
    """`train --processes 2` printed the failed process's traceback (here a ZeroDivisionError on a softmax with
    div_value 0); now its exception's line, said as the command's, with exit 1 (2 once the input is refused as such)."""
    model = softmax_with_div_value_0(tmp_path / "model")
    (tmp_path / "in.txt").write_text("the bank of the river\n" * 20, encoding="utf-8")
    args = ["train", "out", "--train", "in.txt", "--init-from", str(model), "--processes", "2", "--max-steps", "1"]
    done = run(*args, "--no-progress", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr and len(errors) == 1, done.stderr
    assert "ZeroDivisionError" in errors[0] or done.returncode == 2, errors
