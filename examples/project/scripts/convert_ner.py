"""Convert CoNLL-style ``token<TAB>tag`` files (WNUT-17; IOB2 tags) to a .spacy file of entities."""

from __future__ import annotations

from pathlib import Path

import spacy
import typer
from convert_textcat import require_data, sample
from spacy.tokens import Doc, DocBin


def read_sentences(path: Path) -> list[tuple[list[str], list[str]]]:
    """``(words, tags)`` per sentence; sentences end at blank (or whitespace-only) lines; tag = last column."""
    sentences, words, tags = [], [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            if words:
                sentences.append((words, tags))
                words, tags = [], []
            continue
        columns = line.split("\t")
        if len(columns) < 2 or not columns[0]:
            raise ValueError(f"{path}:{number}: expected 'token<TAB>tag', got {line[:60]!r}")
        words.append(columns[0])
        tags.append(columns[-1].strip())
    if words:
        sentences.append((words, tags))
    return sentences


def main(
    source: Path,
    output: Path,
    limit: int = typer.Option(0, help="keep at most this many sentences, a seeded random subset (0 = all)"),
    seed: int = typer.Option(0, help="seed of the subset"),
) -> None:
    """One doc per sentence, with the file's tokens and its IOB2 tags as ``doc.ents``."""
    require_data(source)
    vocab = spacy.blank("en").vocab
    docs = []
    for number, (words, tags) in enumerate(sample(read_sentences(source), limit, seed)):
        try:
            docs.append(Doc(vocab, words=words, ents=tags))
        except ValueError as err:
            raise ValueError(f"{source}: sentence {number} ({' '.join(words)[:60]!r}): {err}") from err
    output.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs).to_disk(output)
    print(f"{output}: {len(docs)} docs, {sum(len(d.ents) for d in docs)} entities")


if __name__ == "__main__":
    typer.run(main)
