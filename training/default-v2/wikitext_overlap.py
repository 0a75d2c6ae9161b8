"""How much of WikiText-2's validation and test text v2's Wikipedia training text holds.

    python training/default-v2/wikitext_overlap.py /work/data/raw [--n 10]

WikiText-2 (valid 60 articles, test 62) comes from English Wikipedia's Good and Featured articles, and
v2 trained on a May 2015 English Wikipedia dump (``wiki``: github:jason-feng/wikiVisual) and Simple
English Wikipedia (``simplewiki``: github:taminemelissa/quiz-generator), so its perplexity on WikiText-2
may be flattered by articles it read. This reports, for each split: the articles whose titles the
training text has, and the share of the split's word n-grams (lower case, letters and digits only, so
that WikiText's tokenization and ``<unk>`` do not hide a match) found anywhere in the training text,
over all articles and per article. ``--write-without DIR`` also writes both splits without the articles
of which ``--share`` (0.1) or more was found, to measure perplexity without them. ``RAW``: the folder
``corpus.sh`` filled (``RAW/wiki/text/*/wiki_*``, ``RAW/simplewiki/**/wiki_*`` JSON lines).
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
WORD = re.compile(r"[a-z0-9]+")
TITLE = re.compile(r'^<doc [^>]*title="([^"]*)"')


def words(text: str) -> list[str]:
    """Lower-case runs of letters and digits, without WikiText's ``unk`` marker."""
    return [w for w in WORD.findall(html.unescape(text).lower()) if w != "unk"]


def wikitext_articles(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """``(title, words, lines)`` of each article of a WikiText file (top-level headings `` = Title = ``)."""
    articles: list[tuple[str, list[str], list[str]]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("= ") and stripped.endswith(" =") and not stripped.startswith("= ="):
            articles.append((stripped[2:-2].strip(), [], []))
        elif not articles:
            continue
        else:
            articles[-1][1].extend(words(line))
        articles[-1][2].append(line)
    return articles


def ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    return (tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def training_documents(raw: Path) -> Iterator[tuple[str, str, str]]:
    """``(source, title, text line)`` for every line of the Wikipedia training text."""
    for path in sorted((raw / "wiki" / "text").glob("*/wiki_*")):
        title = ""
        for line in path.read_text(encoding="utf-8").splitlines():
            match = TITLE.match(line)
            if match:
                title = html.unescape(match.group(1))
            elif not line.startswith("</doc>"):
                yield "wiki", title, line
    for path in sorted((raw / "simplewiki").glob("**/wiki_*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                doc = json.loads(line)
                for paragraph in doc.get("text", "").split("\n"):
                    yield "simplewiki", doc.get("title", ""), paragraph


def normal_title(title: str) -> str:
    return " ".join(words(title.replace("@-@", "-")))


Article = tuple[str, list[str], list[str]]


def report(splits: dict[str, list[Article]], documents: Iterable[tuple[str, str, str]], n: int) -> tuple[str, set]:
    wanted = {split: {g for _, toks, _ in articles for g in ngrams(toks, n)} for split, articles in splits.items()}
    every = set().union(*wanted.values())
    # a title with <unk> (a rare word WikiText replaced) is ambiguous: not compared
    titles = {
        split: {normal_title(t): t for t, _, _ in articles if "<unk>" not in t} for split, articles in splits.items()
    }
    found: set[tuple[str, ...]] = set()
    titles_found: dict[str, set[str]] = {split: set() for split in splits}
    lines = 0
    for source, title, text in documents:
        lines += 1
        key = normal_title(title)
        for split, names in titles.items():
            if key in names:
                titles_found[split].add(f"{names[key]} ({source})")
        tokens = words(text)
        for gram in ngrams(tokens, n):
            if gram in every:
                found.add(gram)
    out = [f"training text: {lines:,} lines; n-grams of {n} words", ""]
    for split, articles in splits.items():
        total = len(wanted[split])
        hit = len(wanted[split] & found)
        out.append(f"## {split}: {len(articles)} articles, {total:,} distinct {n}-grams")
        out.append(f"- {n}-grams found in the training text: {hit:,} ({hit / max(total, 1):.1%})")
        shares = []
        for title, toks, _ in articles:
            grams = set(ngrams(toks, n))
            if grams:
                shares.append((len(grams & found) / len(grams), title))
        shares.sort(reverse=True)
        most = [f"{t} ({s:.1%})" for s, t in shares[:5]]
        out.append(f"- the 5 articles with the largest share of their {n}-grams found: {', '.join(most)}")
        out.append(f"- median article: {shares[len(shares) // 2][0]:.1%} of its {n}-grams found")
        out.append(
            f"- titles present in the training text: {len(titles_found[split])}: "
            + (", ".join(sorted(titles_found[split])) or "-")
        )
        out.append("")
    return "\n".join(out), found


def write_without(articles: list[Article], found: set, n: int, share: float, path: Path) -> list[str]:
    """Write the split without the articles of which at least ``share`` of the n-grams were found; their titles."""
    kept, dropped = [], []
    for title, toks, lines in articles:
        grams = set(ngrams(toks, n))
        if grams and len(grams & found) / len(grams) >= share:
            dropped.append(title)
        else:
            kept.extend(lines)
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
    if not (args.raw / "wiki" / "text").is_dir():
        print(f"{args.raw}/wiki/text not found: run training/default-v2/corpus.sh first", file=sys.stderr)
        return 2
    splits = {name: wikitext_articles(args.wikitext / f"{name}.txt") for name in ("valid", "test")}
    text, found = report(splits, training_documents(args.raw), args.n)
    print(text)
    if args.write_without:
        args.write_without.mkdir(parents=True, exist_ok=True)
        for name, articles in splits.items():
            dropped = write_without(articles, found, args.n, args.share, args.write_without / f"{name}.txt")
            print(f"{args.write_without / name}.txt: without {len(dropped)} articles: {', '.join(dropped)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
