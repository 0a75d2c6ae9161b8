"""A prepared corpus streamed: seeded shard order, every sentence once per epoch, bounded groups, exact resume."""

import hashlib
import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.train import Trainer, train
from spacy_elmo.train.corpus.batching import Vocabulary
from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus
from spacy_elmo.train.corpus.shards import CorpusError, PreparedCorpus
from spacy_elmo.train.output_folder.storage import load_checkpoint
from tests.conftest import torch_threads


def write_lines(path: Path, n_lines: int, seed: int) -> list[list[str]]:
    """``n_lines`` lines of 1..30 made-up words, each line one sentence (no final punctuation), every one distinct."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    lines = [[f"line{seed}_{i}", *rng.choices(words, k=rng.randint(0, 29))] for i in range(n_lines)]
    path.write_text("".join(" ".join(line) + "\n" for line in lines), encoding="utf-8")
    return lines


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A 1,000-line corpus prepared into shards of 64 sentences; returns (directory, its lines)."""
    root = tmp_path_factory.mktemp("shards")
    lines = write_lines(root / "text.txt", 1000, seed=1)
    prepare_corpus(root / "corpus", [SourceSpec(root / "text.txt", "lines")], shard_sentences=64, progress=False)
    return root / "corpus", lines


def epoch(corpus: PreparedCorpus, seed: int, start=None, buffer_size: int = 200) -> list[list[list[str]]]:
    return list(corpus.batches(seed, 0, token_budget=300, buffer_size=buffer_size, max_length=100, start=start))


def test_every_sentence_once_per_epoch_in_batches_within_the_budget(prepared):
    directory, lines = prepared
    corpus = PreparedCorpus([directory])
    assert corpus.words == sum(len(line) for line in lines) and corpus.sentences == len(lines) == 1000
    assert len(corpus.shards) == 16  # 15 x 64 + 40
    batches = epoch(corpus, seed=3)
    seen = [tuple(s) for batch in batches for s in batch]
    assert Counter(seen) == Counter(tuple(line) for line in lines)
    assert all(len(batch) * (max(map(len, batch)) + 2) <= 300 for batch in batches)


def test_the_order_is_a_function_of_the_seed(prepared):
    corpus = PreparedCorpus([prepared[0]])
    assert corpus.order(5, 0) == corpus.order(5, 0) != corpus.order(6, 0)
    assert corpus.order(5, 0) != corpus.order(5, 1)  # each epoch its own order
    assert epoch(corpus, seed=5) == epoch(PreparedCorpus([prepared[0]]), seed=5)
    assert epoch(corpus, seed=5) != epoch(corpus, seed=6)
    # the stream mixes the corpus: the first batch already holds sentences from far apart in the text
    first = [int(s[0].split("_")[1]) for s in epoch(corpus, seed=5)[0]]
    assert max(first) - min(first) > 200


def test_groups_hold_about_buffer_size_sentences(prepared):
    corpus = PreparedCorpus([prepared[0]])
    stream = corpus.batches(0, 0, token_budget=300, buffer_size=200, max_length=100)
    groups = list(stream.groups())
    order = corpus.order(0, 0)
    sizes = [sum(corpus.shards[order[i]].sentences for i in range(a, b)) for a, b in groups]
    assert groups[0][0] == 0 and groups[-1][1] == 16 and all(b == c for (_, b), (c, _) in zip(groups, groups[1:]))
    assert all(200 <= size < 200 + 64 for size in sizes[:-1]) and sizes[-1] <= 200 + 64


def test_a_position_resumes_at_exactly_the_next_batch(prepared):
    corpus = PreparedCorpus([prepared[0]])
    stream = corpus.batches(4, 0, token_budget=300, buffer_size=200, max_length=100)
    straight, positions = [], []
    for batch in stream:
        straight.append(batch)
        positions.append(dict(stream.position))
    assert len(straight) > 20
    for k in range(len(straight)):  # resumed after batch k: the rest, nothing more, nothing less
        assert epoch(corpus, seed=4, start=positions[k]) == straight[k + 1 :]
    assert epoch(corpus, seed=4, start={**positions[3], "epoch": 1}) == straight  # another epoch's: from the start


def test_a_damaged_shard_or_another_corpus_is_refused(prepared, tmp_path):
    directory, _ = prepared
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in directory.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    corpus = PreparedCorpus([copy])
    stream = corpus.batches(0, 0, token_budget=300, buffer_size=200, max_length=100)
    next(iter(stream))
    position = dict(stream.position)
    with pytest.raises(CorpusError, match="not the one the checkpoint's position refers to"):
        corpus.batches(0, 0, 300, 200, 100, start={**position, "corpus": "0" * 16})
    shard = copy / "shard-00003.txt"
    shard.write_text(shard.read_text().replace("w1 ", "w2 ", 1))
    with pytest.raises(CorpusError, match=r"shard-00003\.txt does not match its sha256"):
        epoch(corpus, seed=0)
    (copy / "corpus.json").write_text("{}")
    with pytest.raises(CorpusError, match="not a spacy-elmo prepared corpus manifest"):
        PreparedCorpus([copy])
    with pytest.raises(CorpusError, match="is not a prepared corpus"):
        PreparedCorpus([tmp_path])


def test_the_vocabulary_of_the_counting_pass_is_the_text_files(prepared):
    directory, lines = prepared
    counts = Counter(word for line in lines for word in line)
    corpus = PreparedCorpus([directory])
    for size, min_count in ((50, 1), (None, 40), (10_000, 2)):
        assert corpus.vocabulary(size, min_count).words == Vocabulary.build(counts, size, min_count).words
    assert corpus.distinct_words() == len(counts)


def test_two_corpora_are_one_stream_and_one_vocabulary(prepared, tmp_path):
    other = write_lines(tmp_path / "other.txt", 300, seed=2)
    prepare_corpus(
        tmp_path / "other", [SourceSpec(tmp_path / "other.txt", "lines")], shard_sentences=64, progress=False
    )
    corpus = PreparedCorpus([prepared[0], tmp_path / "other"])
    everything = prepared[1] + other
    seen = Counter(tuple(s) for batch in epoch(corpus, seed=1) for s in batch)
    assert seen == Counter(tuple(line) for line in everything)
    counts = Counter(word for line in everything for word in line)
    assert corpus.vocabulary(100, 1).words == Vocabulary.build(counts, 100, 1).words
    assert corpus.words == sum(counts.values()) and corpus.distinct_words() == len(counts)


@pytest.fixture(scope="module")
def tiny_options():
    """Batches of a few sentences from a buffer smaller than the corpus, a checkpoint at every step."""
    return dict(token_budget=300, buffer_size=200, checkpoint_every=1)


class RecordingTrainer(Trainer):
    """A trainer that records the sentences of every step it takes."""

    def train_step(self, batch, sentences, weight=1.0):
        self.seen = [*getattr(self, "seen", []), [list(s) for s in sentences]]
        return super().train_step(batch, sentences, weight)


@pytest.mark.slow
def test_training_resumed_mid_corpus_continues_at_the_next_batch(prepared, tiny_config, tmp_path):
    directory, _ = prepared
    with torch_threads(1):
        straight = RecordingTrainer(tiny_config(corpus=directory, max_steps=8), tmp_path / "straight", progress=False)
        straight.run()
        split = tmp_path / "split"
        train(tiny_config(corpus=directory, max_steps=5), split, progress=False)
        position = load_checkpoint(split / "checkpoint.safetensors").info["state"]["corpus_position"]
        assert position["epoch"] == 0 and (position["group"], position["batch"]) != (0, 0)
        resumed = RecordingTrainer(tiny_config(corpus=directory, max_steps=8), split, resume=True, progress=False)
        assert resumed.state["step"] == 5
        resumed.run()
    assert resumed.seen == straight.seen[5:8]  # the very batches the straight run trained on next
    a = load_checkpoint(tmp_path / "straight" / "checkpoint.safetensors").model
    b = load_checkpoint(split / "checkpoint.safetensors").model
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)  # one thread, same batches: the same model


def test_text_files_and_a_corpus_together_are_refused(prepared, tiny_config, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("a b c\n")
    config = tiny_config(corpus=prepared[0], train=[{"path": str(text), "format": "lines", "tokenizer": "whitespace"}])
    with pytest.raises(ValueError, match="not both"):
        Trainer(config, tmp_path / "out", progress=False)


def _copy(directory: Path, target: Path) -> Path:
    target.mkdir()
    for path in directory.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    return target


def test_the_counts_file_is_checked_against_the_manifest(prepared, tmp_path):
    """counts.tsv cut to 4 lines was trusted: the run trained on a 4-word vocabulary (the rest <UNK>), exit 0."""
    directory, lines = prepared
    manifest = json.loads((directory / "corpus.json").read_text())
    counts_text = (directory / "counts.tsv").read_text(encoding="utf-8")
    assert manifest["counts_sha256"] == hashlib.sha256(counts_text.encode("utf-8")).hexdigest()
    assert manifest["distinct_words"] == len({w for line in lines for w in line}) == len(counts_text.splitlines())

    truncated = _copy(directory, tmp_path / "truncated")
    (truncated / "counts.tsv").write_text("".join(counts_text.splitlines(keepends=True)[:4]), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"truncated/counts\.tsv does not match its sha256 in corpus\.json"):
        PreparedCorpus([truncated])
    result = CliRunner().invoke(
        app, ["train", str(tmp_path / "model"), "--corpus", str(truncated), "--arch", "tiny", "--no-progress"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {truncated / 'counts.tsv'} does not match its sha256")
    assert not (tmp_path / "model").exists()

    # two counts swapped: the totals still agree, the sha256 does not
    swapped = _copy(directory, tmp_path / "swapped")
    rows = [line.split("\t") for line in counts_text.splitlines()]
    rows[0][1], rows[-1][1] = rows[-1][1], rows[0][1]
    (swapped / "counts.tsv").write_text("".join(f"{w}\t{c}\n" for w, c in rows), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"swapped/counts\.tsv does not match its sha256"):
        PreparedCorpus([swapped])

    # a corpus of an older version (no counts_sha256): its totals are checked
    older = _copy(directory, tmp_path / "older")
    del manifest["counts_sha256"]
    (older / "corpus.json").write_text(json.dumps(manifest))
    PreparedCorpus([older])  # intact: accepted
    (older / "counts.tsv").write_text("".join(counts_text.splitlines(keepends=True)[:4]), encoding="utf-8")
    words = sum(int(line.split("\t")[1]) for line in counts_text.splitlines()[:4])
    with pytest.raises(CorpusError, match=rf"older/counts\.tsv holds 4 words counted {words:,} times, where"):
        PreparedCorpus([older])
    (older / "counts.tsv").unlink()
    with pytest.raises(CorpusError, match=r"the word counts .*older/counts\.tsv are missing"):
        PreparedCorpus([older])
