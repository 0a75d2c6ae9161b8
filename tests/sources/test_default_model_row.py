"""`spacy-elmo models` and `spacy-elmo info` say what the bundled default was trained on, read from its own
metrics.json: the prepared corpus folders a `--corpus` run records, the words seen over every run, its version."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.sources.bundled_versions import DEFAULT_VERSION, MODELS_DIR


def metrics(name: str) -> dict:
    return json.loads((MODELS_DIR / name / "metrics.json").read_text(encoding="utf-8"))


def words_seen(record: dict) -> int:
    """Every run's words in a chain of runs each started from the one before (init_from)."""
    total = 0
    while record and record.get("command"):
        total, record = total + record["words_seen"], record.get("init_from")
    return total


def test_the_default_row_names_its_corpus_words_seen_and_version():
    output = CliRunner().invoke(app, ["models"]).output
    row = " ".join(output.split("default-v1 ")[0].split("\n", 1)[1].split())  # the default row, unwrapped
    record = metrics("default")
    folders = [Path(p).name for p in record["corpus"]["prepared"]]
    assert len(folders) == 3 and not record["corpus"]["train"]  # default-v2 trained on prepared corpora only
    seen = f"{words_seen(record) / 1e6:.1f}M words seen"
    assert seen == "103.2M words seen"  # the default-v2 row's "103M words seen"
    assert f"{DEFAULT_VERSION}: {seen} of a {record['corpus']['words'] / 1e6:.1f}M-word corpus" in row, row
    assert f"({', '.join(folders)}); spacy-elmo train;" in row, row
    assert "of ;" not in row and not re.search(r"\w-\n", output)  # no empty name, no word broken at a hyphen


def test_info_names_the_prepared_corpus_and_the_text_files():
    default = CliRunner().invoke(app, ["info", "default"]).output
    corpus = metrics("default")["corpus"]
    folders = ", ".join(Path(p).name for p in corpus["prepared"])
    assert f"corpus:       {folders} ({corpus['words']:,} words)" in default, default
    first = CliRunner().invoke(app, ["info", "default-v1"]).output
    files = [f"{Path(s['path']).parent.name}/{Path(s['path']).name}" for s in metrics("default-v1")["corpus"]["train"]]
    assert files[0] == "wikitext-2/train.txt" and len(files) == 5
    assert f"corpus:       {', '.join(files)} ({metrics('default-v1')['corpus']['words']:,} words)" in first, first
