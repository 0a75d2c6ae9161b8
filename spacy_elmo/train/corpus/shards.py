"""A prepared corpus on disk (``spacy-elmo prepare-corpus``) and the seeded, resumable stream of its batches.

A prepared corpus directory holds::

    corpus.json          the manifest: sources (files, sha256, provenance, counts), tokenizer, shards, and
                         counts.tsv's sha256 (``counts_sha256``; corpora of older versions: its totals only)
    counts.tsv           every word and its count (``word<TAB>count``), by falling count, ties alphabetical
    shard-00000.txt ...  the tokenized text: one sentence a line, tokens joined by single spaces
                         (no token holds whitespace), a fixed number of sentences per shard

Training streams it (:class:`CorpusBatches`): each epoch visits the shards in a seeded random order;
consecutive shards of that order form a group of about ``buffer_size`` sentences, which is read whole
(each shard checked against its sha256), shuffled, cut into length-bucketed batches and those
batches shuffled, all from seeds of (seed, epoch, group). So memory is bounded by one group, the
order is a function of the seed alone, and a position ``(epoch, group start, batch)`` in a checkpoint
resumes at exactly the next batch without reading anything before it.

Every file is checked against the manifest before it is trusted: the counts file when the corpus is opened
(its sha256, and its totals: one line per distinct word, the counts summing to the words), each shard when it
is read (its sha256). A changed, truncated or missing file is a :class:`CorpusError` naming it.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ...bilm.file_formats import COUNTS_LINE, CorpusManifest
from ...groundwork.excerpt import excerpt
from ...groundwork.file_names import CORPUS_COUNTS, CORPUS_MANIFEST, SHARD_NAME
from ...groundwork.schema_check import check_value, read_json_file
from ...runtime.embedding.windows import length_batches
from .layouts import PathLike

if TYPE_CHECKING:  # pragma: no cover
    from .batching import Vocabulary
# batching (which imports torch) only where a vocabulary is built: the command line reads a corpus's manifest
# (read_manifest) before torch is imported

MANIFEST = CORPUS_MANIFEST
COUNTS = CORPUS_COUNTS
KIND = "spacy-elmo prepared corpus"
VERSION = 1


def shard_name(index: int) -> str:
    """The file name of the ``index``-th shard."""
    return SHARD_NAME.format(index=index)


class CorpusError(ValueError):
    """A prepared corpus that is missing, incomplete, corrupt or changed; names the file."""


@dataclass(frozen=True)
class Shard:
    """One shard file and what the manifest says of it."""

    path: Path
    sentences: int
    words: int
    sha256: str


def read_manifest(directory: PathLike) -> dict[str, Any]:
    """The manifest of a prepared corpus directory, checked; a CorpusError naming the problem otherwise."""
    path = Path(directory).expanduser() / MANIFEST
    if not path.is_file():
        raise CorpusError(
            f"{Path(directory)} is not a prepared corpus (no {MANIFEST}): make one with `spacy-elmo prepare-corpus`"
        )
    advice = "prepare the corpus again (`spacy-elmo prepare-corpus`)"
    manifest = read_json_file(path, None, advice, CorpusError)
    if not isinstance(manifest, dict) or manifest.get("format") != KIND:
        raise CorpusError(f"{path} is not a {KIND} manifest")
    if manifest.get("version") != VERSION:
        version = excerpt(manifest.get("version"))
        raise CorpusError(f"{path} is a {KIND} of version {version}; this spacy-elmo reads {VERSION}")
    checked: dict[str, Any] = check_value(manifest, path, CorpusManifest, advice, CorpusError)
    return checked


class PreparedCorpus:
    """One or more prepared corpus directories, streamed as one: their shards in a fixed order."""

    def __init__(self, directories: Sequence[PathLike]) -> None:
        if not directories:
            raise ValueError("no prepared corpus given")
        self.directories = [Path(d).expanduser().resolve() for d in directories]
        self.manifests = [read_manifest(d) for d in self.directories]
        self.shards = [
            Shard(directory / s["file"], s["sentences"], s["words"], s["sha256"])
            for directory, manifest in zip(self.directories, self.manifests)
            for s in manifest["shards"]
        ]
        if not any(s.words for s in self.shards):
            where = ", ".join(str(d / MANIFEST) for d in self.directories)
            raise CorpusError(f"{where} lists shards of no words: prepare the corpus again")
        missing = [str(s.path) for s in self.shards if not s.path.is_file()]
        if missing:
            raise CorpusError(
                f"prepared corpus shards that its {MANIFEST} lists are missing: {', '.join(missing[:3])}: "
                "prepare the corpus again"
            )
        for directory, manifest in zip(self.directories, self.manifests):
            verify_counts(directory / COUNTS, manifest)
        digest = hashlib.sha256()
        for shard in self.shards:
            digest.update(shard.sha256.encode())
        self.fingerprint = digest.hexdigest()[:16]  # which shards, in which order: a checkpoint's position needs it

    @property
    def words(self) -> int:
        return sum(m["words"] for m in self.manifests)

    @property
    def sentences(self) -> int:
        return sum(m["sentences"] for m in self.manifests)

    def sources(self) -> list[dict[str, Any]]:
        """Each source of each corpus without its file list: path, layout, tokenizer, counts and provenance."""
        return [
            {k: v for k, v in source.items() if k != "files"} | {"corpus": str(directory)}
            for directory, manifest in zip(self.directories, self.manifests)
            for source in manifest.get("sources", [])
        ]

    def word_counts(self) -> Iterator[tuple[str, int]]:
        """``(word, count)`` of one corpus by falling count (ties alphabetical), streamed from its counts file; of
        several, their sums in the same order (held in memory: one entry per distinct word)."""
        if len(self.directories) == 1:
            yield from _read_counts(self.directories[0] / COUNTS)
            return
        total: Counter = Counter()
        for directory in self.directories:
            for word, count in _read_counts(directory / COUNTS):
                total[word] += count
        yield from sorted(total.items(), key=lambda item: (-item[1], item[0]))

    def distinct_words(self) -> int:
        if len(self.directories) == 1:
            return int(self.manifests[0]["distinct_words"])
        return sum(1 for _ in self.word_counts())

    def vocabulary(self, max_size: Optional[int], min_count: int) -> Vocabulary:
        """The softmax vocabulary of :meth:`Vocabulary.build` over the counting pass's counts, read only as far as
        needed."""
        from .batching import SPECIALS, Vocabulary

        words: list[str] = []
        limit = None if max_size is None else max(0, max_size - len(SPECIALS))
        for word, count in self.word_counts():
            if count < min_count or (limit is not None and len(words) >= limit):
                break
            if word not in SPECIALS:
                words.append(word)
        return Vocabulary([*SPECIALS, *words])

    def order(self, seed: int, epoch: int) -> list[int]:
        """The shard indices in the order epoch ``epoch`` visits them (a function of ``seed`` and ``epoch``)."""
        order = list(range(len(self.shards)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        return order

    def read_shard(self, index: int, max_length: int) -> list[list[str]]:
        """The sentences of one shard (cut to ``max_length`` tokens), checked against the manifest's sha256."""
        shard = self.shards[index]
        try:
            data = shard.path.read_bytes()
        except OSError as err:
            raise CorpusError(f"cannot read the prepared corpus shard {shard.path} ({err})") from err
        if hashlib.sha256(data).hexdigest() != shard.sha256:
            raise CorpusError(
                f"{shard.path} does not match its sha256 in {MANIFEST}: the shard was changed or damaged; "
                "prepare the corpus again"
            )
        sentences: list[list[str]] = []
        for line in data.decode("utf-8").split("\n"):
            if line:
                tokens = line.split(" ")
                sentences.extend(tokens[i : i + max_length] for i in range(0, len(tokens), max_length))
        return sentences

    def batches(
        self,
        seed: int,
        epoch: int,
        token_budget: int,
        buffer_size: int,
        max_length: int,
        start: Optional[dict[str, Any]] = None,
    ) -> CorpusBatches:
        """The batches of epoch ``epoch``, from ``start`` (a :attr:`CorpusBatches.position`) when it is of this
        epoch."""
        return CorpusBatches(self, seed, epoch, token_budget, buffer_size, max_length, start)


def counts_digest_and_totals(path: Path) -> tuple[str, int, int]:
    """The sha256 of a counts file, its lines (distinct words) and the sum of its counts (words), in one streamed
    pass; a malformed line is a CorpusError naming it."""
    digest = hashlib.sha256()
    lines = words = 0
    if not path.is_file():
        raise CorpusError(f"the word counts {path} are missing: prepare the corpus again")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            digest.update(raw)
            _, count = _counts_line(raw.decode("utf-8", errors="replace"), path, number)
            lines += 1
            words += count
    return digest.hexdigest(), lines, words


def verify_counts(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse a counts file that is not the one the manifest was written with: its sha256 (recorded since the
    manifest holds ``counts_sha256``) and its totals (one line per distinct word, counts summing to the words)."""
    digest, lines, words = counts_digest_and_totals(path)
    recorded = manifest.get("counts_sha256")
    if recorded is not None and recorded != digest:
        problem = f"does not match its sha256 in {MANIFEST}"
    elif (lines, words) != (manifest["distinct_words"], manifest["words"]):
        problem = (
            f"holds {lines:,} words counted {words:,} times, where {MANIFEST} says "
            f"{manifest['distinct_words']:,} words counted {manifest['words']:,} times"
        )
    else:
        return
    raise CorpusError(f"{path} {problem}: the counts were changed or truncated; prepare the corpus again")


def _counts_line(line: str, path: Path, number: int) -> tuple[str, int]:
    """``(word, count)`` of one ``word<TAB>count`` line; a CorpusError naming it otherwise."""
    found = COUNTS_LINE.fullmatch(line)
    if found is None:
        raise CorpusError(
            f"{path}:{number} is not a 'word<TAB>count' line (a count of at most 15 digits): prepare the corpus again"
        )
    return found.group(1), int(found.group(2))


def _read_counts(path: Path) -> Iterator[tuple[str, int]]:
    """The ``word<TAB>count`` lines of a counts file; a malformed line is a CorpusError naming it."""
    if not path.is_file():
        raise CorpusError(f"the word counts {path} are missing: prepare the corpus again")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            yield _counts_line(line, path, number)


class CorpusBatches:
    """The batches (token lists) of one epoch of a prepared corpus; :attr:`position` is where the next one is.

    Iterate it once. After each batch, ``position`` (a JSON-able dict) resumes at the batch after it:
    ``{"epoch", "group", "batch", "corpus"}`` = the epoch, the index in the epoch's shard order where
    the group starts, the batch within the group, and the corpus fingerprint (a position of another
    corpus or epoch is refused or ignored, never silently misapplied).
    """

    def __init__(
        self,
        corpus: PreparedCorpus,
        seed: int,
        epoch: int,
        token_budget: int,
        buffer_size: int,
        max_length: int,
        start: Optional[dict[str, Any]] = None,
    ) -> None:
        self.corpus = corpus
        self.seed, self.epoch = seed, epoch
        self.token_budget, self.buffer_size, self.max_length = token_budget, buffer_size, max_length
        self.position: dict[str, Any] = {"epoch": epoch, "group": 0, "batch": 0, "corpus": corpus.fingerprint}
        if start is not None and start.get("epoch") == epoch:
            if start.get("corpus") != corpus.fingerprint:
                raise CorpusError(
                    f"the prepared corpus {', '.join(map(str, corpus.directories))} is not the one the checkpoint's "
                    "position refers to (its shards changed): resume with the corpus it was trained on"
                )
            self.position = {**self.position, "group": int(start["group"]), "batch": int(start["batch"])}

    def groups(self) -> Iterator[tuple[int, int]]:
        """``(start, end)`` index ranges of the epoch's shard order, each about ``buffer_size`` sentences."""
        shards, order = self.corpus.shards, self.corpus.order(self.seed, self.epoch)
        start = 0
        while start < len(order):
            end, held = start, 0
            while end < len(order) and (end == start or held < self.buffer_size):
                held += shards[order[end]].sentences
                end += 1
            yield start, end
            start = end

    def group_batches(self, start: int, end: int) -> list[list[list[str]]]:
        """The batches of the group of order positions ``[start, end)``, in their seeded order."""
        order = self.corpus.order(self.seed, self.epoch)
        sentences = [s for i in order[start:end] for s in self.corpus.read_shard(i, self.max_length)]
        rng = random.Random(f"{self.seed}:{self.epoch}:{start}")
        rng.shuffle(sentences)
        lengths = [len(s) + 2 for s in sentences]  # each row counts its two markers
        batches = [[sentences[i] for i in batch] for batch in length_batches(lengths, None, self.token_budget)]
        rng.shuffle(batches)
        return batches

    def __iter__(self) -> Iterator[list[list[str]]]:
        first, skip = self.position["group"], self.position["batch"]
        for start, end in self.groups():
            if end <= first:
                continue
            if start < first:
                raise CorpusError(f"a checkpoint position starts inside a shard group ({first}): not of this corpus")
            batches = self.group_batches(start, end)
            for index in range(skip, len(batches)):
                last = index + 1 == len(batches)
                self.position = {**self.position, "group": end if last else start, "batch": 0 if last else index + 1}
                yield batches[index]
            skip = 0


__all__ = ["COUNTS", "MANIFEST", "CorpusBatches", "CorpusError", "PreparedCorpus", "read_manifest", "shard_name"]
