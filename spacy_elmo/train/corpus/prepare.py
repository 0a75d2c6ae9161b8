"""``spacy-elmo prepare-corpus``: text files of any layout -> a prepared corpus (tokenized shards, counts, manifest).

One streaming pass: each file's paragraphs (:mod:`.layouts`) are tokenized once, split into
sentences and written to shard files of ``shard_sentences`` sentences, while a Counter counts the
words (memory: one entry per distinct word, never the text). Each shard, the counts file and the
manifest (written last) appear whole; the format is :mod:`.shards`'.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

from tqdm import tqdm

from ...about import __version__
from ...bilm.file_formats import SourceInfo
from ...groundwork.atomic_write import atomic_path, write_json_atomically
from ...groundwork.file_names import SOURCE_INFO
from ...groundwork.schema_check import read_json_file
from ...runtime.features.tokenize import SPACY, WHITESPACE, resolve_tokenizer
from ..config import DEFAULT_SHARD_SENTENCES
from ..output_folder.folder_lock import folder_claimed
from ..output_folder.recorded_paths import recorded
from .layouts import PathLike, check_layout, layout_files, text_blocks
from .sentences import sha256_of, split_sentences
from .shards import COUNTS, KIND, MANIFEST, VERSION, shard_name


def default_tokenizer(layout: str) -> str:
    """Already tokenized lines are split on whitespace; prose (every other layout) goes through spaCy's rules."""
    return WHITESPACE if layout == "lines" else SPACY


@dataclass
class SourceSpec:
    """One ``--source``: a file or directory, its layout, tokenizer and provenance (a JSON object, may be empty)."""

    path: Path
    layout: str = "lines"
    tokenizer: Optional[str] = None  # None: default_tokenizer(layout)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        check_layout(self.layout)
        self.tokenizer = self.tokenizer or default_tokenizer(self.layout)
        if self.tokenizer not in (WHITESPACE, SPACY):
            raise ValueError(f"unknown tokenizer {self.tokenizer!r}: expected {WHITESPACE} or {SPACY}")


def read_source_info(path: Optional[PathLike], source: PathLike) -> dict[str, Any]:
    """Provenance for ``source``: the JSON object in ``path``, else ``source-info.json`` in the source directory (or
    beside the source file), else ``{}``."""
    if path is None:
        source = Path(source).expanduser()
        candidate = (source if source.is_dir() else source.parent) / SOURCE_INFO
        if not candidate.is_file():
            return {}
        path = candidate
    path = Path(path).expanduser()
    advice = "--source-info takes a JSON object (repository, commit, licence, ...): correct the file"
    try:
        info: dict[str, Any] = read_json_file(path, SourceInfo, advice)
    except OSError as err:
        raise FileNotFoundError(f"--source-info: cannot read {path} ({err})") from err
    return info


class ShardWriter:
    """Sentences -> shard files of ``per_shard`` sentences, each written whole
    (:func:`~spacy_elmo.groundwork.atomic_write.atomic_path`) with its counts and sha256 recorded."""

    def __init__(self, directory: Path, per_shard: int) -> None:
        self.directory, self.per_shard = directory, per_shard
        self.shards: list[dict[str, Any]] = []
        self._stack: Optional[ExitStack] = None
        self._handle: Optional[IO[bytes]] = None
        self._digest = hashlib.sha256()
        self._sentences = self._words = 0

    def add(self, tokens: Sequence[str]) -> None:
        if self._handle is None:
            self._open()
        assert self._handle is not None
        data = (" ".join(tokens) + "\n").encode("utf-8")
        self._handle.write(data)
        self._digest.update(data)
        self._sentences += 1
        self._words += len(tokens)
        if self._sentences >= self.per_shard:
            self.close_shard()

    def _open(self) -> None:
        self._stack = ExitStack()
        tmp = self._stack.enter_context(atomic_path(self.directory / shard_name(len(self.shards))))
        self._handle = self._stack.enter_context(open(tmp, "wb"))  # noqa: SIM115 (closed by the stack, before its rename)
        self._digest, self._sentences, self._words = hashlib.sha256(), 0, 0

    def close_shard(self) -> None:
        """Finish the open shard (it appears under its name) and record it."""
        if self._stack is None:
            return
        self._stack.close()  # closes the file, then renames it into place
        name = shard_name(len(self.shards))
        self.shards.append(
            {"file": name, "sentences": self._sentences, "words": self._words, "sha256": self._digest.hexdigest()}
        )
        self._stack = self._handle = None

    def abort(self) -> None:
        """Drop the open shard (its temporary file is removed) and the shards written so far: a run that fails leaves
        no part of a corpus behind."""
        if self._stack is not None:
            error = RuntimeError("aborted")
            self._stack.__exit__(RuntimeError, error, None)
            self._stack = self._handle = None
        for shard in self.shards:
            (self.directory / shard["file"]).unlink(missing_ok=True)
        self.shards = []


def clean_tokens(tokens: Sequence[str]) -> list[str]:
    """Tokens that hold no whitespace (a shard line is split on single spaces): a rare token with whitespace inside
    (spaCy keeps e.g. ``"a\\u2028b"`` whole) is split into its pieces."""
    return " ".join(tokens).split()


def file_sentences(path: Path, layout: str, tokenize: Any, max_length: int) -> Iterator[list[str]]:
    """The token lists of one file, each sentence cut at ``max_length`` tokens."""
    for block in text_blocks(path, layout):
        tokens = clean_tokens(tokenize(block))
        if tokens:
            yield from split_sentences(tokens, max_length)


def prepare_corpus(
    output_dir: PathLike,
    sources: Sequence[SourceSpec],
    *,
    max_length: int = 100,
    shard_sentences: int = DEFAULT_SHARD_SENTENCES,
    progress: bool = True,
    command: str = "",
) -> dict[str, Any]:
    """Tokenize ``sources`` once into a prepared corpus in ``output_dir``; returns its manifest.

    ``output_dir`` may exist but must not hold a prepared corpus already (its manifest): a finished
    corpus is never overwritten by a run that might then fail half-way. A run that fails leaves none of its
    files behind, and the folder is held while it runs (:mod:`.folder_lock`: a second run into it is refused).
    Memory is bounded whatever the length of the files' lines (:mod:`.layouts`).
    """
    if not sources:
        raise ValueError("give at least one --source")
    if max_length < 1 or shard_sentences < 1:
        raise ValueError("--max-length and --shard-sentences must be at least 1")
    out = Path(output_dir).expanduser()
    if (out / MANIFEST).exists():
        raise ValueError(f"{out} already holds a prepared corpus ({MANIFEST}): choose another directory or remove it")
    files_of = [layout_files(source.path, source.layout) for source in sources]  # every file found before any work
    with folder_claimed(out):
        if (out / MANIFEST).exists():  # a run that ended in between
            raise ValueError(f"{out} already holds a prepared corpus ({MANIFEST}): choose another directory")
        return _prepare(out, sources, files_of, max_length, shard_sentences, progress, command)


def _prepare(
    out: Path,
    sources: Sequence[SourceSpec],
    files_of: list[list[Path]],
    max_length: int,
    shard_sentences: int,
    progress: bool,
    command: str,
) -> dict[str, Any]:
    """:func:`prepare_corpus`'s work, in the folder it holds."""
    started = time.perf_counter()
    counts: Counter = Counter()
    writer = ShardWriter(out, shard_sentences)
    records: list[dict[str, Any]] = []
    counts_digest = hashlib.sha256()
    try:
        for source, files in zip(sources, files_of):
            records.append(_prepare_source(source, files, writer, counts, max_length, progress))
        writer.close_shard()
        with atomic_path(out / COUNTS) as tmp, open(tmp, "wb") as handle:
            for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
                line = f"{word}\t{count}\n".encode()
                handle.write(line)
                counts_digest.update(line)
    except BaseException:
        writer.abort()
        raise
    seconds = time.perf_counter() - started
    words = sum(r["words"] for r in records)
    manifest = {
        "format": KIND,
        "version": VERSION,
        "created_by": f"spacy-elmo {__version__}",
        "command": command,
        "max_length": max_length,
        "shard_sentences": shard_sentences,
        "words": words,
        "sentences": sum(r["sentences"] for r in records),
        "distinct_words": len(counts),
        "seconds": round(seconds, 2),
        "words_per_s": round(words / max(seconds, 1e-9), 1),
        "counts": COUNTS,
        "counts_sha256": counts_digest.hexdigest(),  # checked as the shards' are (shards.verify_counts)
        "sources": records,
        "shards": writer.shards,
    }
    manifest = recorded(manifest, out)  # a shared corpus names its sources by name, not by this machine's paths
    try:
        write_json_atomically(out / MANIFEST, manifest)
    except BaseException:
        writer.abort()
        (out / COUNTS).unlink(missing_ok=True)
        raise
    return manifest


def _prepare_source(
    source: SourceSpec, files: list[Path], writer: ShardWriter, counts: Counter, max_length: int, progress: bool
) -> dict[str, Any]:
    """Tokenize the files of one source into ``writer``; its manifest record (with each file's counts)."""
    tokenize = resolve_tokenizer(source.tokenizer)
    root = source.path.expanduser().resolve()
    entries = []
    for path in tqdm(files, desc=str(source.path), unit="file", disable=not progress):
        sentences = words = 0
        for tokens in file_sentences(path, source.layout, tokenize, max_length):
            writer.add(tokens)
            counts.update(tokens)
            sentences += 1
            words += len(tokens)
        entries.append(
            {
                "path": str(path.relative_to(root)) if root.is_dir() else path.name,
                "bytes": path.stat().st_size,
                "sha256": sha256_of(path),
                "sentences": sentences,
                "words": words,
            }
        )
    return {
        "path": str(root),
        "layout": source.layout,
        "tokenizer": source.tokenizer,
        "info": source.info,
        "files": entries,
        "bytes": sum(e["bytes"] for e in entries),
        "sentences": sum(e["sentences"] for e in entries),
        "words": sum(e["words"] for e in entries),
    }


__all__ = ["DEFAULT_SHARD_SENTENCES", "SOURCE_INFO", "SourceSpec", "prepare_corpus", "read_source_info"]
