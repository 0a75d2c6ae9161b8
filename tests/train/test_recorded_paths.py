"""What a run's files say of the paths it was given: relative to its folder or by name, never this machine's
directories; and a run folder moved together with its text still resumes."""

import dataclasses
import hashlib
import json
import random
import shutil
import sys

import pytest

from spacy_elmo.train import Trainer, train
from spacy_elmo.train.output_folder.recorded_paths import (
    recorded,
    recorded_command,
    recorded_path,
    resolved_path,
    resumable_path,
)
from spacy_elmo.train.output_folder.storage import load_checkpoint
from tests.conftest import torch_threads


def test_a_record_names_a_path_inside_its_folder_relative_to_it_and_any_other_by_name():
    folder = "/home/someone/runs/stage-2"
    assert recorded_path("/home/someone/runs/stage-2/text/train.txt", folder) == "text/train.txt"
    assert recorded_path(folder, folder) == "stage-2"  # the folder itself, by its name
    assert recorded_path("/home/someone/runs/stage-1", folder) == "stage-1"
    assert recorded_path("/home/someone/runs/stage-20/x.txt", folder) == "x.txt"  # a name that only starts alike
    assert recorded_path("text/train.txt", folder) == "text/train.txt"  # recorded already: unchanged


def test_a_command_is_recorded_with_each_path_as_the_folder_sees_it():
    argv = [
        "/home/someone/venv/bin/spacy-elmo",
        "train",
        "runs/stage-2",
        "--init-from",
        "/home/someone/runs/stage-1",
        "--corpus=/data/prep/wiki",
        "--valid",
        "../shared/data/wikitext-2/valid.txt",
        "--arch",
        "small",
        "--init-from",
        "https://example.org/elmo/model.tar.gz",
    ]
    line = recorded_command(argv, "/home/someone/runs/stage-2", cwd="/home/someone")
    assert line == (
        "spacy-elmo train stage-2 --init-from stage-1 --corpus=wiki --valid valid.txt --arch small "
        "--init-from https://example.org/elmo/model.tar.gz"
    )
    assert recorded_command(line, "/elsewhere") == line  # a recorded line, recorded again: the same


def test_a_record_keeps_no_path_from_the_root():
    metrics = {
        "command": "/x/spacy_elmo/__main__.py train /tmp/out --corpus /work/data/prep/gutenberg",
        "corpus": {"prepared": ["/work/data/prep/gutenberg"], "words": 12},
        "stages": [{"started_from": "/work/runs/stage-1", "sources": [{"path": "/work/data/raw/wiki", "words": 3}]}],
    }
    assert recorded(metrics, "/tmp/out") == {
        "command": "python -m spacy_elmo train out --corpus gutenberg",
        "corpus": {"prepared": ["gutenberg"], "words": 12},
        "stages": [{"started_from": "stage-1", "sources": [{"path": "wiki", "words": 3}]}],
    }


def test_a_checkpoint_keeps_the_way_from_its_folder_to_the_text():
    assert resumable_path("/a/data/train.txt", "/a/runs/out") == "../../data/train.txt"
    assert resolved_path("../../data/train.txt", "/b/runs/out") == "/b/data/train.txt"  # the folder moved with it
    assert resolved_path("/a/data/train.txt", "/b/runs/out") == "/a/data/train.txt"  # an older checkpoint's


def test_a_checkpoint_takes_the_way_to_its_text_from_its_folders_real_path(tmp_path):
    project, scratch = tmp_path.resolve() / "project", tmp_path.resolve() / "scratch"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.txt").write_text("a b c\n", encoding="utf-8")
    (scratch / "runs" / "m").mkdir(parents=True)
    (project / "runs").symlink_to(scratch / "runs", target_is_directory=True)
    text = str(project / "data" / "train.txt")
    way = resumable_path(text, project / "runs" / "m")
    assert way == "../../../project/data/train.txt"  # from scratch/runs/m, where the folder really is
    for folder in (project / "runs" / "m", scratch / "runs" / "m"):
        assert resolved_path(way, folder) == text
    assert resolved_path("../../data/train.txt", project / "runs" / "m") == text  # an earlier version's way: kept


def test_a_prepared_corpus_names_its_sources_and_its_command_without_the_machines_folders(tmp_path, monkeypatch):
    from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus

    source = tmp_path / "texts" / "wiki"
    source.mkdir(parents=True)
    (source / "a.txt").write_text("one two three .\nfour five .\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    argv = ["/venv/bin/spacy-elmo", "prepare-corpus", "prep/wiki", "--source", str(source)]
    command = recorded_command(argv, "prep/wiki", cwd=tmp_path)
    manifest = prepare_corpus("prep/wiki", [SourceSpec(source, "lines", "whitespace")], progress=False, command=command)
    written = (tmp_path / "prep" / "wiki" / "corpus.json").read_text(encoding="utf-8")
    assert str(tmp_path) not in written
    assert manifest["command"] == "spacy-elmo prepare-corpus wiki --source wiki"
    assert [s["path"] for s in manifest["sources"]] == ["wiki"] and manifest["sources"][0]["files"][0][
        "path"
    ] == "a.txt"


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


@pytest.mark.slow
def test_a_run_records_no_path_of_this_machine_and_resumes_when_moved_with_its_text(tmp_path, tiny_config, monkeypatch):
    """Every file of a run folder is free of the machine's directories (metrics.json, the card, the checkpoint), and
    the folder, moved together with its text, continues with --resume."""
    first = tmp_path / "first"
    data, out = first / "data", first / "runs" / "out"
    data.mkdir(parents=True)
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    for name, lines in (("train.txt", 300), ("valid.txt", 40)):
        text = "\n".join(" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(lines))
        (data / name).write_text(text + "\n", encoding="utf-8")
    monkeypatch.chdir(first)  # the command's relative paths are from where it ran
    monkeypatch.setattr(sys, "argv", ["/venv/bin/spacy-elmo", "train", "runs/out", "--train", "data/train.txt"])
    options = dict(token_budget=512, max_length=20, max_steps=2, checkpoint_every=1, eval_every=0)
    config = tiny_config("data/train.txt", data / "valid.txt", **options)
    with torch_threads(1):
        train(config, "runs/out", progress=False)
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        checkpoint = load_checkpoint(out / "checkpoint.safetensors").info
        card = (out / "README.md").read_text(encoding="utf-8")
        for where, text in (("metrics.json", json.dumps(metrics)), ("the checkpoint", json.dumps(checkpoint))):
            assert str(tmp_path) not in text, where
        assert str(tmp_path) not in card
        absolute = [s for s in _strings([metrics, checkpoint["metrics"]]) if s.startswith("/")]
        assert not absolute, absolute
        assert metrics["command"] == "spacy-elmo train out --train train.txt"
        assert [s["path"] for s in metrics["corpus"]["train"] + metrics["corpus"]["valid"]] == [
            "train.txt",
            "valid.txt",
        ]
        assert [s["path"] for s in checkpoint["config"]["train"]] == ["../../data/train.txt"]

        moved = tmp_path / "moved"
        shutil.move(first, moved)
        monkeypatch.chdir(tmp_path)
        moved_text = [
            {**source, "path": str(moved / "data" / name)}
            for source, name in zip(config.train + config.valid, ("train.txt", "valid.txt"))
        ]
        again = dataclasses.replace(config, train=moved_text[:1], valid=moved_text[1:], max_steps=3)
        resumed = Trainer(again, moved / "runs" / "out", resume=True, progress=False)
        assert [str(s.path) for s in resumed.train_sources] == [str(moved / "data" / "train.txt")]
        resumed.run()
    assert resumed.state["step"] == 3


def _write_texts(folder, seed=0, lines=300):
    """``folder``/train.txt and valid.txt: random sentences of forty words (``seed`` picks which)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(40)]
    for name, count in (("train.txt", lines), ("valid.txt", 40)):
        text = "\n".join(" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(count))
        (folder / name).write_text(text + "\n", encoding="utf-8")


def _cli_train(out, *args):
    """``spacy-elmo train OUT ...`` in this process: a tiny model, one checkpoint a step."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    tiny = ["--arch", "tiny", "--min-count", "1", "--token-budget", "512", "--max-length", "20", "--seed", "3"]
    common = ["--checkpoint-every", "1", "--threads", "1", "--no-progress"]
    with torch_threads(1):
        return CliRunner().invoke(app, ["train", str(out), *tiny, *common, *args])


def _step(out):
    return load_checkpoint(out / "checkpoint.safetensors").info["state"]["step"]


@pytest.mark.slow
@pytest.mark.parametrize("text", ["files", "prepared corpus"])
def test_a_run_copied_without_its_text_resumes_on_the_text_the_command_names(tmp_path, monkeypatch, text):
    """A run folder copied away from its text, resumed with --train/--corpus and --valid naming where the text is,
    was refused ("the run's text is not at ..."): the named text, checked against the run's, is read instead."""
    from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus

    project = tmp_path / "project"
    _write_texts(project / "data")
    if text == "files":
        named = ["--train", str(project / "data" / "train.txt")]
    else:
        source = SourceSpec(project / "data" / "train.txt", "lines", "whitespace")
        prepare_corpus(project / "prep", [source], shard_sentences=50, progress=False)
        named = ["--corpus", str(project / "prep")]
    named += ["--valid", str(project / "data" / "valid.txt")]
    monkeypatch.chdir(project)
    result = _cli_train("runs/m", *named, "--max-steps", "2")
    assert result.exit_code == 0, result.output
    shutil.copytree(project / "runs" / "m", tmp_path / "elsewhere" / "m")  # the run alone
    monkeypatch.chdir(tmp_path / "elsewhere")
    result = _cli_train("m", "--resume", "--max-steps", "3", *named)
    assert result.exit_code == 0, result.output
    assert _step(tmp_path / "elsewhere" / "m") == 3
    _write_texts(tmp_path / "another", seed=1)  # another validation text under the name: refused, naming it
    result = _cli_train("m", "--resume", "--max-steps", "4", *named[:-1], str(tmp_path / "another" / "valid.txt"))
    assert result.exit_code == 2 and "another/valid.txt" in result.output and "--valid" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    if text == "files":  # another training text, or another prepared corpus, named: refused alike
        other = ["--train", str(tmp_path / "another" / "train.txt")]
    else:
        source = SourceSpec(tmp_path / "another" / "train.txt", "lines", "whitespace")
        prepare_corpus(tmp_path / "another" / "prep", [source], shard_sentences=50, progress=False)
        other = ["--corpus", str(tmp_path / "another" / "prep")]
    result = _cli_train("m", "--resume", "--max-steps", "4", *other, *named[-2:])
    assert result.exit_code == 2 and "another" in result.output and "--init-from" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert _step(tmp_path / "elsewhere" / "m") == 3


@pytest.mark.slow
def test_a_run_copied_beside_another_text_under_its_texts_name_is_refused(tmp_path, monkeypatch):
    """A run folder copied without its text into a project whose data/train.txt is another text resumed at its old
    position in the other file, silently: the checkpoint records its text's sha256, and another text is refused."""
    project, other = tmp_path / "project", tmp_path / "other"
    _write_texts(project / "data")
    monkeypatch.chdir(project)
    result = _cli_train("runs/m", "--train", "data/train.txt", "--valid", "data/valid.txt", "--max-steps", "2")
    assert result.exit_code == 0, result.output
    _write_texts(other / "data", seed=1)
    shutil.copytree(project / "runs" / "m", other / "runs" / "m")
    monkeypatch.chdir(other)
    result = _cli_train("runs/m", "--resume", "--max-steps", "3")
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert len(line.splitlines()) == 1 and "data/train.txt" in line and "--init-from" in line, line
    assert _step(other / "runs" / "m") == 2  # nothing trained on the other text
    shutil.copy(project / "data" / "train.txt", other / "data" / "train.txt")  # the run's text back (its valid: not)
    result = _cli_train("runs/m", "--resume", "--max-steps", "3")
    assert result.exit_code == 2 and "data/valid.txt" in result.output and "--valid" in result.output, result.output
    shutil.copy(project / "data" / "valid.txt", other / "data" / "valid.txt")
    result = _cli_train("runs/m", "--resume", "--max-steps", "3")
    assert result.exit_code == 0, result.output
    assert _step(other / "runs" / "m") == 3
    train_sha = hashlib.sha256((project / "data" / "train.txt").read_bytes()).hexdigest()
    metrics = json.loads((other / "runs" / "m" / "metrics.json").read_text(encoding="utf-8"))
    assert [s.get("sha256") for s in metrics["corpus"]["train"]] == [train_sha]  # what identifies the text


@pytest.mark.slow
def test_a_run_reached_through_a_symbolic_link_resumes_from_every_path_to_it(tmp_path, monkeypatch):
    """``runs`` a link to a scratch disk: a run started as ``runs/m`` did not resume as ``.`` from inside it or by its
    real path ("the run's text is not at .../scratch/data/train.txt"): its way to the text was taken from the
    path as typed and followed from the real one."""
    project, scratch = tmp_path / "project", tmp_path / "scratch"
    _write_texts(project / "data")
    (scratch / "runs").mkdir(parents=True)
    (project / "runs").symlink_to(scratch / "runs", target_is_directory=True)
    monkeypatch.chdir(project)
    result = _cli_train("runs/m", "--train", "data/train.txt", "--valid", "data/valid.txt", "--max-steps", "1")
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(project / "runs" / "m")
    result = _cli_train(".", "--resume", "--max-steps", "2")
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(project)
    result = _cli_train("runs/m", "--resume", "--max-steps", "3")
    assert result.exit_code == 0, result.output
    monkeypatch.chdir(tmp_path)
    result = _cli_train(str(scratch / "runs" / "m"), "--resume", "--max-steps", "4")
    assert result.exit_code == 0, result.output
    assert _step(scratch / "runs" / "m") == 4
