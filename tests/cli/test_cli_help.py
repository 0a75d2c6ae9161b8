"""`spacy-elmo --help` and each command's: usage lines, whole-sentence summaries in a newcomer's order, examples
that parse; a missing input file said before any model loads."""

import re
import shlex

import pytest
import typer
from typer.testing import CliRunner

from spacy_elmo.cli import app

WIDTH = {"COLUMNS": "80"}  # a common terminal: summaries must fit it whole
OWN_HELP = {"allennlp-elmo"}  # its --help is AllenNLP's own parser's (argparse), not ours


def commands():
    return typer.main.get_command(app).commands


def listing():
    """The ``Commands:`` section of ``spacy-elmo --help``: (name, summary) in order, wrapped lines joined."""
    text = CliRunner().invoke(app, ["--help"], env=WIDTH).output
    section = text.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    rows: list[list[str]] = []
    for line in section.splitlines():
        name, _, summary = line.strip().partition("  ")
        if line.startswith("  ") and not line.startswith("   "):
            rows.append([name, summary.strip()])
        else:
            rows[-1][1] += " " + line.strip()
    return [(name, summary) for name, summary in rows]


def usage(name):
    return CliRunner().invoke(app, [name, "--help"], env=WIDTH).output.splitlines()[0]


def test_usage_lines_spell_arguments_in_upper_case():
    assert usage("embed").endswith(" embed [OPTIONS] INPUT_FILE OUTPUT_FILE")
    assert usage("evaluate").endswith(" evaluate [OPTIONS] MODEL_DIR TEXT_FILES...")
    assert usage("info").endswith(" info [OPTIONS] [MODEL_DIR]")  # optional: in brackets
    for name in set(commands()) - OWN_HELP:
        arguments = usage(name).split("[OPTIONS]", 1)[1]
        assert "{" not in arguments and arguments == arguments.upper(), (name, arguments)


def test_the_listing_has_every_command_once_with_a_whole_sentence_embed_first():
    rows = listing()
    names = [name for name, _ in rows]
    assert sorted(names) == sorted(commands()) and len(set(names)) == len(names)
    assert names[0] == "embed" and names.index("embed") < names.index("train")
    for name, summary in rows:
        assert summary[0].isupper() and summary.endswith(".") and not summary.endswith("..."), (name, summary)
        assert not re.search(r"\b(e\.g|i\.e)\.$", summary) and summary.count("(") == summary.count(")"), summary
        assert len(f"  {max(names, key=len)}  {summary}") <= 80, (name, summary)  # one line: nothing cut or wrapped


@pytest.mark.parametrize("name", sorted(set(commands()) - OWN_HELP))
def test_each_commands_help_ends_with_examples_that_parse(name):
    text = CliRunner().invoke(app, [name, "--help"], env=WIDTH).output
    block = re.split(r"\n  Examples?:\n", text)
    assert len(block) == 2, f"no example in `spacy-elmo {name} --help`"
    lines = [line.strip() for line in block[1].splitlines() if line.strip()]
    assert lines
    command = commands()[name]
    for line in lines:
        words = shlex.split(line)
        assert words[:2] == ["spacy-elmo", name], line
        command.make_context(name, words[2:])  # the example is a valid command line (UsageError otherwise)


@pytest.mark.parametrize(
    "args, heavy",
    [
        (["embed", "missing.txt", "out.hdf5"], "spacy_elmo.runtime.backend.load_bilm"),
        (["evaluate", "default", "missing.txt"], "spacy_elmo.train.evaluate"),
        (["adapt", "out", "--train", "missing.spacy", "--dev", "missing.spacy"], "spacy_elmo.spacy.adapt.adapt"),
        (["plot-mix", "missing_pipeline", "mix.png"], "spacy.load"),
    ],
)
def test_a_missing_input_file_is_said_before_any_work(args, heavy, tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the command went to work before checking its input files")

    monkeypatch.setattr(heavy, never)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "input file missing" in result.output and "does not exist" in result.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.hdf5").exists()
