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

Memory is bounded whatever the lines' length: a text block (line, paragraph) longer than
:data:`MAX_BLOCK_CHARS` characters comes in pieces of at most that many, each cut after its last space or tab
(a line without any: at the limit), read piece by piece (:func:`bounded_lines`), never held whole. So a
minified dump without a newline streams like any text (only the one sentence across each cut is split in
two). A ``jsonl`` line is parsed whole, so one longer than :data:`MAX_JSON_LINE_CHARS` characters is refused
with a ValueError naming the file, the line and the limit.
"""

from __future__ import annotations

import html
import itertools
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from ...groundwork.file_names import SOURCE_INFO, PathLike

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
# the longest text block handed on whole: spaCy's own default for the longest text it takes (Language.max_length)
MAX_BLOCK_CHARS = 1_000_000
MAX_JSON_LINE_CHARS = 1 << 26  # a JSON line is parsed whole: at most 64 Mi characters (a book-sized record fits)
GUTENBERG_HEADER_LINES = 2000  # no header is longer (in lines, or in MAX_BLOCK_CHARS characters)
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
            yield from (line for line in bounded_lines(handle) if line.strip())
        elif layout == "raw":
            yield from paragraphs(bounded_lines(handle))
        elif layout == "gutenberg":
            yield from paragraphs(gutenberg_body(bounded_lines(handle)))
        elif layout == "wikiextractor":
            yield from wikiextractor_paragraphs(bounded_lines(handle))
        else:
            yield from jsonl_paragraphs(json_lines(handle, str(path)), str(path))


def bounded_lines(handle: TextIO) -> Iterator[str]:
    """The lines of ``handle``; one longer than :data:`MAX_BLOCK_CHARS` in pieces of at most that many characters,
    each cut after its last space or tab (without any: at the limit), only the last piece ending in ``"\\n"``.
    Memory: one piece, whatever the line's length."""
    limit = MAX_BLOCK_CHARS
    rest = ""
    while True:
        text = handle.readline(limit - len(rest))
        piece = rest + text
        rest = ""
        if not piece:
            return
        if len(piece) < limit or piece.endswith("\n"):  # a whole line (or the file's end)
            yield piece
            if not text:
                return
            continue
        cut = max(piece.rfind(" "), piece.rfind("\t")) + 1
        if cut > 0:
            piece, rest = piece[:cut], piece[cut:]
        yield piece


def split_long(text: str) -> Iterator[str]:
    """``text`` in pieces of at most :data:`MAX_BLOCK_CHARS` characters, cut as :func:`bounded_lines` cuts."""
    limit = MAX_BLOCK_CHARS
    while len(text) > limit:
        cut = max(text.rfind(" ", 0, limit), text.rfind("\t", 0, limit)) + 1
        cut = cut if cut > 0 else limit
        yield text[:cut]
        text = text[cut:]
    yield text


def paragraphs(lines: Iterable[str]) -> Iterator[str]:
    """Blank-line separated paragraphs with their hard line wraps joined by spaces; one longer than
    :data:`MAX_BLOCK_CHARS` characters in pieces of whole lines (the lines themselves: :func:`bounded_lines`)."""
    paragraph: list[str] = []
    size = 0
    for line in lines:
        stripped = line.strip()
        if stripped:
            if paragraph and size + len(stripped) > MAX_BLOCK_CHARS:
                yield " ".join(paragraph)
                paragraph, size = [], 0
            paragraph.append(stripped)
            size += len(stripped) + 1
        elif paragraph:
            yield " ".join(paragraph)
            paragraph, size = [], 0
    if paragraph:
        yield " ".join(paragraph)


def gutenberg_body(lines: Iterable[str]) -> Iterator[str]:
    """The lines of a Project Gutenberg file between its START and END markers.

    A START marker whose title wraps onto further lines ends at the line that closes it with ``***``.
    Without a START marker every line is kept (up to an END marker, if any): the text is not dropped
    because its header is unusual.
    """
    buffered: list[str] = []  # the lines before a START marker, kept until one is seen
    held = 0  # their characters
    started = False
    closing = 0  # lines left of a START marker that wraps onto more lines
    for line in lines:
        if closing:
            closing = 0 if "***" in line else closing - 1
            continue
        if GUTENBERG_END.match(line):
            break
        if not started and GUTENBERG_START.match(line):
            started, buffered, held = True, [], 0
            wraps = "SMALL PRINT" not in line.upper() and "***" not in line.strip().lstrip("*")
            closing = 3 if wraps else 0
            continue
        if started:
            yield line
        else:
            buffered.append(line)
            held += len(line)
            if len(buffered) > GUTENBERG_HEADER_LINES or held > MAX_BLOCK_CHARS:  # no header is this long: the file
                yield from buffered  # has no START marker
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


def json_lines(handle: TextIO, name: str) -> Iterator[str]:
    """The lines of ``handle``, each read whole; one longer than :data:`MAX_JSON_LINE_CHARS` characters is a
    ValueError naming it (``name:line``) and the limit, before it is held."""
    limit = MAX_JSON_LINE_CHARS
    for number in itertools.count(1):
        line = handle.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith("\n"):
            raise ValueError(
                f"{name}:{number} is a JSON line longer than {limit:,} characters, the most read whole: split the "
                "record into several lines"
            )
        yield line


def jsonl_paragraphs(lines: Iterable[str], name: str = "<jsonl>", field: str = "text") -> Iterator[str]:
    """The paragraphs (non-blank lines, each at most :data:`MAX_BLOCK_CHARS` characters: :func:`split_long`) of each
    JSON object's ``field``; a bad line is a ValueError naming it."""
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
        for part in text.split("\n"):
            if part.strip():
                yield from split_long(part.strip())


__all__ = [
    "LAYOUTS",
    "MAX_BLOCK_CHARS",
    "MAX_JSON_LINE_CHARS",
    "bounded_lines",
    "check_layout",
    "layout_files",
    "paragraphs",
    "text_blocks",
]
