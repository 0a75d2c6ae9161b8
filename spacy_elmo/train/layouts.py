"""The text layouts training reads: a file -> its paragraphs (text blocks), streamed, boilerplate left out.

``lines``
    one sentence or paragraph per line (WikiText); blank lines are skipped.
``raw``
    running prose: paragraphs separated by blank lines, hard line wraps joined.
``gutenberg``
    a Project Gutenberg book: ``raw`` between the ``*** START OF ...`` and ``*** END OF ...`` lines
    (older files: the small print's ``*END*THE SMALL PRINT!`` line and ``End of the Project
    Gutenberg ...``); the licence header and footer are left out; a file without the markers is read
    whole.
``wikiextractor``
    WikiExtractor's output: ``<doc ...>`` ... ``</doc>`` articles, one paragraph per line; the
    ``<doc>`` lines and each article's title line are left out, HTML entities unescaped.
``jsonl``
    one JSON object per line (WikiExtractor's ``--json``, most corpus dumps): the ``text`` field,
    one paragraph per line of it.

A directory stands for the files of its layout under it, recursively, in sorted order
(:func:`layout_files`). Text is read as UTF-8; undecodable bytes become U+FFFD.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..bilm.files import SOURCE_INFO, PathLike

LAYOUTS = ("lines", "raw", "gutenberg", "wikiextractor", "jsonl")
# the files a directory stands for, per layout (WikiExtractor names its files wiki_00, wiki_01, ...)
FILE_PATTERNS = {
    "lines": ("*.txt",),
    "raw": ("*.txt",),
    "gutenberg": ("*.txt",),
    "wikiextractor": ("wiki_*",),
    "jsonl": ("*.jsonl", "*.json", "wiki_*"),
}
# where the book starts: after "*** START OF THE PROJECT GUTENBERG EBOOK ..." (older files: after the small print's
# "*END*THE SMALL PRINT! ..."), and where it ends: at "End of the Project Gutenberg EBook of ..." (the line before
# the END marker; in older files the only end mark) or at "*** END OF THE PROJECT GUTENBERG EBOOK ..."
GUTENBERG_START = re.compile(
    r"^\s*(\*{3}\s*START OF (THIS|THE) PROJECT GUTENBERG|\*END\*?\s*THE SMALL PRINT)", re.IGNORECASE
)
GUTENBERG_END = re.compile(
    r"^\s*(\*{3}\s*END OF (THIS|THE) PROJECT GUTENBERG|END OF (THE |THIS )?PROJECT GUTENBERG)", re.IGNORECASE
)
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
SIDECARS = frozenset({SOURCE_INFO})  # provenance notes beside the text, never text themselves


def check_layout(layout: str) -> str:
    """``layout`` if it is one of :data:`LAYOUTS`, else a ValueError naming them."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown text layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    return layout


def layout_files(path: PathLike, layout: str) -> list[Path]:
    """``path`` itself (a file), or the files of ``layout`` under the directory ``path`` (recursively, sorted)."""
    path = Path(path).expanduser()
    check_layout(layout)
    if path.is_file():
        return [path.resolve()]
    if not path.is_dir():
        raise FileNotFoundError(f"text file or directory not found: {path}")
    found = {
        p.resolve()
        for pattern in FILE_PATTERNS[layout]
        for p in path.rglob(pattern)
        if p.is_file()
        and p.name not in SIDECARS
        and not any(part.startswith(".") for part in p.relative_to(path).parts)
    }
    if not found:
        patterns = " or ".join(FILE_PATTERNS[layout])
        raise FileNotFoundError(f"directory {path} has no {patterns} files (the {layout} layout's files)")
    return sorted(found)


def text_blocks(path: PathLike, layout: str) -> Iterator[str]:
    """The paragraphs of one file in ``layout`` (each non-blank), streamed."""
    check_layout(layout)
    with open(path, encoding="utf-8", errors="replace") as handle:
        if layout == "lines":
            yield from (line for line in handle if line.strip())
        elif layout == "raw":
            yield from paragraphs(handle)
        elif layout == "gutenberg":
            yield from paragraphs(gutenberg_body(handle))
        elif layout == "wikiextractor":
            yield from wikiextractor_paragraphs(handle)
        else:
            yield from jsonl_paragraphs(handle, str(path))


def paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line separated paragraphs with their hard line wraps joined by spaces."""
    paragraph: list[str] = []
    for line in lines:
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            yield " ".join(paragraph)
            paragraph = []
    if paragraph:
        yield " ".join(paragraph)


def gutenberg_body(lines: Iterable[str]) -> Iterator[str]:
    """The lines of a Project Gutenberg file between its START and END markers.

    A START marker whose title wraps onto further lines ends at the line that closes it with ``***``.
    Without a START marker every line is kept (up to an END marker, if any): the text is not dropped
    because its header is unusual.
    """
    buffered: list[str] = []  # the lines before a START marker, kept until one is seen
    started = False
    closing = 0  # lines left of a START marker that wraps onto more lines
    for line in lines:
        if closing:
            closing = 0 if "***" in line else closing - 1
            continue
        if GUTENBERG_END.match(line):
            break
        if not started and GUTENBERG_START.match(line):
            started, buffered = True, []
            wraps = "SMALL PRINT" not in line.upper() and "***" not in line.strip().lstrip("*")
            closing = 3 if wraps else 0
            continue
        if started:
            yield line
        else:
            buffered.append(line)
            if len(buffered) > 2000:  # no header is this long: the file has no START marker
                yield from buffered
                buffered, started = [], True
    yield from buffered


def wikiextractor_paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """The paragraphs of WikiExtractor articles: ``<doc>`` lines and each title line dropped, entities unescaped."""
    title_next = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("<doc ") or stripped == "<doc>":
            title_next = True
            continue
        if stripped == "</doc>":
            title_next = False
            continue
        if not stripped:
            continue
        if title_next:
            title_next = False
            continue
        yield html.unescape(stripped)


def jsonl_paragraphs(lines: Iterable[str], name: str = "<jsonl>", field: str = "text") -> Iterator[str]:
    """The paragraphs (non-blank lines) of each JSON object's ``field``; a bad line is a ValueError naming it."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as err:
            raise ValueError(f"{name}:{number} is not a JSON object ({err})") from err
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise ValueError(f"{name}:{number} has no {field!r} string")
        # JSON can spell lone surrogates, which no UTF-8 file can hold: replaced like undecodable bytes
        text = LONE_SURROGATE.sub("\ufffd", record[field])
        yield from (part.strip() for part in text.split("\n") if part.strip())


__all__ = ["LAYOUTS", "check_layout", "layout_files", "paragraphs", "text_blocks"]
