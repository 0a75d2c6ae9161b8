"""Convert ``__label__X<TAB>text`` lines (the SST-5 flat files, fastText style) to a .spacy file of exclusive cats."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Optional

import spacy
import typer
from spacy.tokens import DocBin

PREFIX = "__label__"
FETCH = "python -m spacy project assets ."  # the public files, into the `data` folder (assets/ by default)


def require_data(path: Path) -> None:
    """Stop with a message saying how to get the data when ``path`` (a corpus file) is missing, not a traceback."""
    if not path.is_file():
        raise SystemExit(
            f"error: {path}: no such file. The project reads its corpora from the folder in its `data` variable "
            f"(assets/ by default). Fetch the public files there with `{FETCH}`, or give a folder that holds "
            f"them as `--vars.data DIR` (or point the *_train/dev/test variables at your own copy)."
        )


def read_lines(path: Path) -> list[tuple[str, str]]:
    """``(label, text)`` per non-blank line; a line without ``__label__X<TAB>`` is an error naming it."""
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep or not label.startswith(PREFIX) or not text.strip():
            raise ValueError(f"{path}:{number}: expected '__label__X<TAB>text', got {line[:60]!r}")
        rows.append((label[len(PREFIX) :], text.strip()))
    return rows


def sample(rows: list, limit: int, seed: int) -> list:
    """At most ``limit`` rows (0 = all), a seeded random subset kept in file order."""
    if not limit or limit >= len(rows):
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), limit))
    return [rows[i] for i in keep]


def main(
    source: Path,
    output: Path,
    limit: int = typer.Option(0, help="keep at most this many lines, a seeded random subset (0 = all)"),
    seed: int = typer.Option(0, help="seed of the subset"),
    labels: Optional[str] = typer.Option(None, help="comma-separated label set (default: the labels in SOURCE)"),
) -> None:
    """Tokenize each text with spaCy's English tokenizer and store one-hot ``doc.cats``."""
    require_data(source)
    rows = sample(read_lines(source), limit, seed)
    label_set = labels.split(",") if labels else sorted({label for label, _ in read_lines(source)})
    nlp = spacy.blank("en")
    docs = []
    for label, text in rows:
        if label not in label_set:
            raise ValueError(f"{source}: label {label!r} is not in --labels {label_set}")
        doc = nlp.make_doc(text)
        doc.cats = {name: float(name == label) for name in label_set}
        docs.append(doc)
    output.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs).to_disk(output)
    print(f"{output}: {len(docs)} docs, labels {label_set}")


if __name__ == "__main__":
    typer.run(main)
