"""How much of WikiText-2's validation and test text v2's Wikipedia training text holds.

    python training/default-v2/wikitext_overlap.py DATA/raw [--n 10] [--write-without DIR]

WikiText-2 (valid 60 articles, test 62) comes from English Wikipedia's Good and Featured articles, and
v2 trained on a May 2015 English Wikipedia dump (``wiki``: github:jason-feng/wikiVisual) and Simple
English Wikipedia (``simplewiki``: github:taminemelissa/quiz-generator), so its perplexity on WikiText-2
may be flattered by articles it read. This reports, for each split, the share of its word n-grams (lower
case, letters and digits only, so that WikiText's tokenization and ``<unk>`` do not hide a match) found
anywhere in the training text, over all articles and per article. The training text is read as
``corpus.sh`` prepared it (the ``wikiextractor`` and ``jsonl`` layouts of ``spacy_elmo.train.corpus.layouts``).
``--write-without DIR`` also writes both splits without the articles of which ``--share`` (0.1) or more
was found, to measure perplexity without them. ``RAW``: the folder ``corpus.sh`` filled.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Optional

from spacy_elmo.train.corpus.layouts import layout_files, text_blocks

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
WORD = re.compile(r"[a-z0-9]+")
# the Wikipedia sources of v2 and their layouts, as corpus.sh passes them to prepare-corpus
SOURCES = (("wiki", "wikiextractor"), ("simplewiki", "jsonl"))

Article = tuple[str, list[str], list[str]]  # title, its words, its lines as in the WikiText file
NGram = tuple[str, ...]


def words(text: str) -> list[str]:
    """Lower-case runs of letters and digits, without WikiText's ``unk`` marker."""
    return [w for w in WORD.findall(html.unescape(text).lower()) if w != "unk"]


def wikitext_articles(path: Path) -> list[Article]:
    """The articles of a WikiText file (top-level headings `` = Title = ``); lines before the first are left out."""
    articles: list[Article] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("= ") and stripped.endswith(" =") and not stripped.startswith("= ="):
            articles.append((stripped[2:-2].strip(), [], []))
        elif articles:
            articles[-1][1].extend(words(line))
        if articles:
            articles[-1][2].append(line)
    return articles


def ngrams(tokens: list[str], n: int) -> Iterator[NGram]:
    return (tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def training_paragraphs(raw: Path) -> Iterator[str]:
    """Every paragraph of v2's Wikipedia training text, read by the layouts prepare-corpus used."""
    for source, layout in SOURCES:
        for path in layout_files(raw / source, layout):
            yield from text_blocks(path, layout)


def found_share(article: Article, found: set[NGram], n: int) -> Optional[float]:
    """The share of an article's distinct n-grams that were found (None for an article shorter than n words)."""
    grams = set(ngrams(article[1], n))
    return len(grams & found) / len(grams) if grams else None


def report(splits: dict[str, list[Article]], paragraphs: Iterable[str], n: int) -> tuple[str, set[NGram]]:
    """The report's text, and the splits' n-grams found in ``paragraphs``."""
    wanted = {split: {g for _, toks, _ in articles for g in ngrams(toks, n)} for split, articles in splits.items()}
    every = set().union(*wanted.values())
    found: set[NGram] = set()
    count = 0
    for text in paragraphs:
        count += 1
        found.update(gram for gram in ngrams(words(text), n) if gram in every)
    out = [f"training text: {count:,} paragraphs; n-grams of {n} words", ""]
    for split, articles in splits.items():
        total = len(wanted[split])
        hit = len(wanted[split] & found)
        out.append(f"## {split}: {len(articles)} articles, {total:,} distinct {n}-grams")
        out.append(f"- {n}-grams found in the training text: {hit:,} ({hit / max(total, 1):.1%})")
        shares = sorted(
            ((share, article[0]) for article in articles if (share := found_share(article, found, n)) is not None),
            reverse=True,
        )
        most = [f"{t} ({s:.1%})" for s, t in shares[:5]]
        out.append(f"- the 5 articles with the largest share of their {n}-grams found: {', '.join(most)}")
        out.append(f"- median article: {shares[len(shares) // 2][0]:.1%} of its {n}-grams found")
        out.append("")
    return "\n".join(out), found


def write_without(articles: list[Article], found: set[NGram], n: int, share: float, path: Path) -> list[str]:
    """Write the split without the articles of which at least ``share`` of the n-grams were found; their titles."""
    kept, dropped = [], []
    for article in articles:
        found_here = found_share(article, found, n)
        if found_here is not None and found_here >= share:
            dropped.append(article[0])
        else:
            kept.extend(article[2])
    path.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="the folder corpus.sh filled (wiki/, simplewiki/)")
    parser.add_argument("--n", type=int, default=10, help="words per n-gram")
    parser.add_argument("--wikitext", type=Path, default=SHARED / "data" / "wikitext-2")
    parser.add_argument("--write-without", type=Path, default=None, help="write valid.txt and test.txt here without...")
    parser.add_argument("--share", type=float, default=0.1, help="...the articles of which this share was found")
    args = parser.parse_args(argv)
    missing = [source for source, _ in SOURCES if not (args.raw / source).is_dir()]
    if missing:
        print(f"{args.raw}: no {', '.join(missing)} folder: run training/default-v2/corpus.sh first", file=sys.stderr)
        return 2
    splits = {name: wikitext_articles(args.wikitext / f"{name}.txt") for name in ("valid", "test")}
    text, found = report(splits, training_paragraphs(args.raw), args.n)
    print(text)
    if args.write_without:
        args.write_without.mkdir(parents=True, exist_ok=True)
        for name, articles in splits.items():
            dropped = write_without(articles, found, args.n, args.share, args.write_without / f"{name}.txt")
            print(f"{args.write_without / name}.txt: without {len(dropped)} articles: {', '.join(dropped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
