"""`spacy-elmo --help` and each command's: usage lines, whole-sentence summaries in a newcomer's order, examples
that parse; a missing input file or a bad argument said before any model loads, and before torch or spaCy is
imported."""

import importlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from spacy_elmo.about import install_extra
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
    # newer typer marks a variadic argument "..."; typer 0.9 (spaCy 3.7's) does not
    assert re.search(r" evaluate \[OPTIONS\] MODEL_DIR TEXT_FILES(\.\.\.)?$", usage("evaluate"))
    # optional: in brackets (typer 0.9 brackets no argument)
    assert re.search(r" info \[OPTIONS\] (\[MODEL_DIR\]|MODEL_DIR)$", usage("info"))
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
        (["embed", "missing.txt", "out.hdf5"], "spacy_elmo.runtime.embedding.backend.load_bilm"),
        (["evaluate", "default", "missing.txt"], "spacy_elmo.train.run.evaluation.evaluate_files"),
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


# -- arguments checked before torch or spaCy is imported ---------------------------------------------------------

# runs the command line as `python -m spacy_elmo` does, then says (on its last stderr line) which heavy libraries the
# process imported, whatever the command's exit
_IMPORTS_SEEN = (
    "import atexit, runpy, sys\n"
    "heavy = {'torch', 'spacy', 'sklearn', 'distributed'}\n"
    "atexit.register(lambda: print('imported:', *sorted(heavy & set(sys.modules)), file=sys.stderr))\n"
    "sys.argv = ['spacy-elmo', *sys.argv[1:]]\n"
    "runpy.run_module('spacy_elmo', run_name='__main__', alter_sys=True)\n"
)


def run_command(*args, cwd):
    """``python -m spacy_elmo ARGS`` in ``cwd``: (exit status, stderr without the import line, heavy imports)."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORTS_SEEN, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("imported:"), result.stderr
    return result.returncode, "\n".join(lines[:-1]), lines[-1].split()[1:]


def test_embed_says_a_missing_input_file_in_one_line_without_importing_torch(tmp_path):
    status, said, imported = run_command("embed", "missing.txt", "out.h5", cwd=tmp_path)
    assert status == 2 and said == "error: input file missing.txt does not exist", said
    assert imported == [], f"spacy-elmo embed imported {imported} before checking its arguments"
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["embed", "in.txt", "no_folder/out.h5"], "cannot write no_folder/out.h5: the directory no_folder does not"),
        (["embed", "in.txt", "."], "cannot write .: it is a directory"),
        (["embed", "in.txt", "out.h5", "--top", "--average"], "choose one of --all, --top and --average"),
        (["embed", "in.txt", "out.h5", "--scheduler", "local:0"], "expected local:N with N >= 1"),
        (["embed", "in.txt", "out.h5", "--precision", "int4"], "precision must be one of ['bfloat16', 'float16'"),
        (["embed", "in.txt", "out.h5", "--batch-size", "0"], "batch_size=0: expected a positive integer"),
        (["evaluate", "default", "missing.txt"], "input file missing.txt does not exist"),
        (["adapt", "out", "--train", "missing.spacy", "--dev", "in.txt"], "input file missing.spacy does not exist"),
        (["adapt", "out", "--train", "in.txt", "--dev", "in.txt", "--init-from", "no/dir"], "directory not found"),
        (["plot-mix", "missing_pipeline", "mix.png"], "input file missing_pipeline does not exist"),
        (["train", "out", "--train", "in.txt", "--lr", "-1"], "that float32 holds (at most 3.4e38), not -1.0"),
        (["train", "out", "--train", "in.txt", "--dropout", "1"], "--dropout must be in [0, 1), not 1.0"),
        (["train", "out"], "give training text with --train FILE"),
        (["train", "out", "--train", "in.txt", "--cutoffs", "2000;10000"], "--cutoffs must be word ranks separated"),
        (["prepare-corpus", "out", "--source", "missing.txt"], "input file missing.txt does not exist"),
        (["prepare-corpus", "out", "--source", "in.txt", "--format", "csv"], "unknown text layout 'csv'"),
        (["evaluate", "default", "in.txt", "--output", "no_folder/r.json"], "the directory no_folder does not exist"),
        (["plot-mix", "in.txt", "mix.png"], "in.txt is not a directory: give a trained spaCy pipeline's directory"),
        (["plot-mix", ".", "no_folder/mix.png"], "cannot write no_folder/mix.png: the directory no_folder does not"),
        (["similarity", "a b", "b c", "--word", "b", "--plot", "no_folder/s.png"], "the directory no_folder does"),
        (["train", "out", "--train", "in.txt", "--arch", "nosuch"], "unknown architecture 'nosuch': expected one of"),
        (["train", "out", "--train", "in.txt", "--arch", "missing.json"], "unknown architecture 'missing.json'"),
        (["train", "out", "--corpus", "missing"], "missing is not a prepared corpus (no corpus.json)"),
        (["train", "out", "--train", "in.txt", "--init-from", "missing"], "ELMo model 'missing' not found"),
        (["train", "out", "--train", "in.txt", "--init-from", "no/dir"], "ELMo model directory not found: 'no/dir'"),
        (["train", "out", "--train", "in.txt", "--processes", "0"], "--processes=0: expected a positive integer"),
        (["embed", "in.txt", "out.h5", "--tokenizer", "bogus"], "tokenizer='bogus': not a spaCy language code"),
        (["evaluate", "default", "in.txt", "--tokenizer", "bogus"], "unknown tokenizer 'bogus'"),
        (["evaluate", "missing", "in.txt"], "ELMo model 'missing' not found"),
        # a model string that names nothing: said before torch is imported (embed took 13-23 s to say it)
        (["embed", "in.txt", "out.h5", "--model", "my_elmo"], "ELMo model 'my_elmo' not found"),
        (["info", "my_elmo"], "ELMo model 'my_elmo' not found"),
        (["download", "my_elmo"], "ELMo model 'my_elmo' not found"),
        (["similarity", "a b", "b c", "--word", "b", "--model", "my_elmo"], "ELMo model 'my_elmo' not found"),
        (["similarity", "a b", "b c", "--word", "b", "--plot", "s.xyz"], "matplotlib writes no 'xyz' format"),
    ],
)
def test_bad_arguments_are_said_before_torch_or_spacy_is_imported(args, message, tmp_path):
    (tmp_path / "in.txt").write_text("a b c\n", encoding="utf-8")
    status, said, imported = run_command(*args, cwd=tmp_path)
    assert status == 2 and said.startswith("error: ") and message in said and "\n" not in said, said
    assert imported == [], f"spacy-elmo {args[0]} imported {imported} before checking its arguments"


def _tiny_arch(**lstm):
    """The tiny preset's options, its ``lstm`` section updated."""
    from spacy_elmo.train.network.presets import PRESETS

    raw = json.loads(json.dumps(PRESETS["tiny"]))
    raw["lstm"].update(lstm)
    return raw


@pytest.mark.parametrize(
    "arch, message",
    [
        (_tiny_arch(dim=10**9), "huge.json: lstm.dim must be an int from 1 to 65536, not 1000000000"),
        (_tiny_arch(projection_dim=10**8), "huge.json: lstm.projection_dim must be an int from 1 to 65536"),
        (_tiny_arch(dim=60000, projection_dim=60000), "huge.json: the architecture has 129,606,802,984 parameters"),
        ({"lstm": 1}, "huge.json: expected an object with 'lstm' and 'char_cnn' sections"),
    ],
)
def test_an_absurd_architecture_is_said_before_torch_is_imported(arch, message, tmp_path):
    """``train --arch FILE`` with absurd widths ended in a 150-line allocator traceback after the model began to be
    built: its schema and size bounds are checked with the other arguments."""
    (tmp_path / "in.txt").write_text("a b c\n", encoding="utf-8")
    (tmp_path / "huge.json").write_text(json.dumps(arch), encoding="utf-8")
    status, said, imported = run_command("train", "out", "--train", "in.txt", "--arch", "huge.json", cwd=tmp_path)
    assert status == 2 and said.startswith(f"error: {message}") and "\n" not in said, said
    assert imported == [], f"spacy-elmo train imported {imported} before checking its arguments"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["similarity", "a b", "b c", "--word", "b", "--plot", "s.png", "--model", "missing"],
        ["plot-mix", ".", "mix.png"],
    ],
)
def test_a_missing_matplotlib_is_said_before_a_model_or_pipeline_loads(args, tmp_path):
    """It was said after the model loaded (similarity: once matplotlib.patches failed to import, as a traceback)."""
    blocked = "import sys\nsys.modules['matplotlib'] = None  # as if it were not installed\n" + _IMPORTS_SEEN
    result = subprocess.run(
        [sys.executable, "-c", blocked, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    *said, seen = result.stderr.strip().splitlines()
    assert result.returncode == 2 and said == [f"error: plots need matplotlib: {install_extra('plot')}"], said
    assert "pip install matplotlib" in said[0] and seen == "imported:", seen
    assert not any(tmp_path.iterdir())


def test_import_spacy_elmo_is_cheap_and_the_public_names_still_import():
    code = (
        "import sys, spacy_elmo, spacy_elmo.train, spacy_elmo.train.config\n"
        "import spacy_elmo.groundwork.file_names, spacy_elmo.groundwork.atomic_write\n"
        "import spacy_elmo.bilm.engine.precisions  # the precision table: no torch\n"
        "import spacy_elmo.runtime.configuration.validation\n"
        "heavy = {'torch', 'spacy', 'sklearn'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "from spacy_elmo import ElmoBackend, ElmoVectorizer, WeightFileError, layer_weights, load_bilm\n"
        "from spacy_elmo import mix_layers, pool\n"
        "import spacy_elmo.train.run.evaluation  # the module first: the package's evaluate is still the function\n"
        "from spacy_elmo.train import evaluate, train, Trainer, TrainConfig, make_sources, PRESETS\n"
        "assert callable(evaluate) and callable(train) and evaluate.__module__ == 'spacy_elmo.train.run.evaluation'\n"
        "assert set(spacy_elmo.__all__) <= set(dir(spacy_elmo))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("package", ["spacy_elmo", "spacy_elmo.train", "spacy_elmo.bilm", "spacy_elmo.bilm.engine"])
def test_no_lazy_public_name_is_also_a_submodule(package):
    """A name both public and a submodule's is whichever was imported last (``spacy_elmo.train.evaluate`` once was
    the module or the function depending on import order)."""
    module = importlib.import_module(package)
    folder = Path(module.__file__).parent
    submodules = {path.stem for path in folder.glob("*.py")} | {
        path.parent.name for path in folder.glob("*/__init__.py")
    }
    assert set(module.__all__) - {"__version__"} and not set(module.__all__) & submodules
    for name in module.__all__:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError):
        module.no_such_name


def test_plot_mix_says_a_folder_that_is_no_pipeline_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["plot-mix", str(tmp_path), str(tmp_path / "mix.png")])
    assert result.exit_code == 2 and "not a spaCy pipeline" in result.output, result.output
    assert not (tmp_path / "mix.png").exists()


def test_embed_takes_precision_and_dtype_its_deprecated_name(tmp_path):
    """``--precision`` is the option (its help lists every precision); ``--dtype``, its name up to 0.2.0, still works,
    hidden from the help, with a FutureWarning, and is checked the same way."""
    helped = CliRunner().invoke(app, ["embed", "--help"], env={"COLUMNS": "200"})
    assert "--precision" in helped.output and "--dtype" not in helped.output
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    status, said, imported = run_command("embed", "in.txt", "out.h5", "--dtype", "int4", cwd=tmp_path)
    assert status == 2 and "FutureWarning" in said and "use precision='int4'" in said, said
    assert said.splitlines()[-1].startswith("error: precision must be one of ['bfloat16', 'float16'"), said
    assert imported == [], imported
