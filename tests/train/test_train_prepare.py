"""spacy-elmo prepare-corpus: the layout samples -> shards, counts and manifest; memory flat in corpus size."""

import hashlib
import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.train.corpus.prepare import SourceSpec, clean_tokens, prepare_corpus

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "corpus_layouts"
ROOT = Path(__file__).resolve().parents[2]


def shard_sentences(directory: Path) -> list[list[str]]:
    return [
        line.split(" ") for p in sorted(directory.glob("shard-*.txt")) for line in p.read_text("utf-8").splitlines()
    ]


@pytest.fixture(scope="module")
def wiki_sample(tmp_path_factory):
    """The WikiExtractor sample prepared by the command, shards of 5 sentences; returns (directory, manifest)."""
    out = tmp_path_factory.mktemp("prepared") / "wiki"
    source = SAMPLES / "wikiextractor"
    result = CliRunner().invoke(
        app,
        ["prepare-corpus", str(out), "--source", str(source), "--format", "wikiextractor", "--shard-sentences", "5"],
    )
    assert result.exit_code == 0, result.output
    assert "prepared" in result.output and "words/s" in result.output
    return out, json.loads((out / "corpus.json").read_text())


def test_the_sample_is_tokenized_once_into_shards_as_spacy_tokenizes_it(wiki_sample):
    out, manifest = wiki_sample
    # independently: every article line that is not markup or a title, through spaCy's own tokenizer
    raw = (SAMPLES / "wikiextractor" / "AA" / "wiki_00").read_text(encoding="utf-8").splitlines()
    titles = {i + 1 for i, line in enumerate(raw) if line.startswith("<doc")}
    paragraphs = [
        line
        for i, line in enumerate(raw)
        if line.strip() and not line.startswith(("<doc", "</doc")) and i not in titles
    ]
    tokenizer = spacy.blank("en").tokenizer
    expected = [t.text for p in paragraphs for t in tokenizer(p) if t.text.strip()]
    sentences = shard_sentences(out)
    assert [t for s in sentences for t in s] == expected
    assert "&amp;" not in " ".join(expected) and "&" in " ".join(expected)
    assert all(s[-1] in ".!?" or s[-1] in "\"')" for s in sentences[:-1])  # split after sentence ends
    assert manifest["words"] == len(expected) and manifest["sentences"] == len(sentences)
    assert [s["sentences"] for s in manifest["shards"]][:-1] == [5] * (len(manifest["shards"]) - 1)


def test_the_manifest_counts_and_provenance_are_those_of_the_files(wiki_sample):
    out, manifest = wiki_sample
    sentences = shard_sentences(out)
    counts = Counter(t for s in sentences for t in s)
    lines = [line.split("\t") for line in (out / "counts.tsv").read_text("utf-8").splitlines()]
    assert {w: int(c) for w, c in lines} == counts
    assert [(w, int(c)) for w, c in lines] == sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    assert manifest["distinct_words"] == len(counts)
    for shard in manifest["shards"]:
        data = (out / shard["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
        assert len(data.split()) == shard["words"]
    (source,) = manifest["sources"]
    (entry,) = source["files"]
    sample = SAMPLES / "wikiextractor" / "AA" / "wiki_00"
    assert entry["path"] == "AA/wiki_00" and entry["sha256"] == hashlib.sha256(sample.read_bytes()).hexdigest()
    assert source["layout"] == "wikiextractor" and source["tokenizer"] == "spacy"
    info = json.loads((SAMPLES / "wikiextractor" / "source-info.json").read_text())
    assert source["info"] == info and info["commit"] == "1c0fac92f29f17c1603bfffbe864e0dfdff66897"
    assert source["words"] == manifest["words"] and manifest["words_per_s"] > 0


def test_every_sample_layout_and_its_licence_in_one_corpus(tmp_path):
    specs = [SourceSpec(SAMPLES / layout, layout) for layout in ("gutenberg", "jsonl")]
    specs[0].info = {"repository": "github:rcdm-uga/Gutenberg_Text", "licence": "public domain"}
    manifest = prepare_corpus(tmp_path / "c", specs, shard_sentences=7, progress=False)
    gutenberg, jsonl = manifest["sources"]
    assert gutenberg["info"]["licence"] == "public domain" and jsonl["info"] == {}  # given, not read beside it
    words = [t for s in shard_sentences(tmp_path / "c") for t in s]
    assert gutenberg["words"] + jsonl["words"] == len(words) == manifest["words"]
    assert "Gutenberg-tm" not in words and "revid" not in " ".join(words)
    assert words.index("PREFACE") < words.index("April")  # sources in the order given


def test_a_prepared_corpus_is_never_overwritten_and_bad_sources_are_named(wiki_sample, tmp_path):
    out, _ = wiki_sample
    runner = CliRunner()
    result = runner.invoke(app, ["prepare-corpus", str(out), "--source", str(SAMPLES / "jsonl"), "--format", "jsonl"])
    assert result.exit_code == 2 and "already holds a prepared corpus" in result.output
    result = runner.invoke(app, ["prepare-corpus", str(tmp_path / "x"), "--source", str(tmp_path / "none.txt")])
    assert result.exit_code == 2 and "none.txt" in result.output
    result = runner.invoke(app, ["prepare-corpus", str(tmp_path / "x"), "--source", str(SAMPLES), "--format", "xml"])
    assert result.exit_code == 2 and "unknown text layout 'xml'" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    result = runner.invoke(app, ["prepare-corpus", str(tmp_path / "y"), "-s", str(bad), "-f", "jsonl"])
    assert result.exit_code == 2 and "bad.jsonl:2 is not a JSON object" in result.output
    assert not list((tmp_path / "y").glob("*"))  # a failed run leaves no shard and no manifest behind


def test_tokens_never_hold_whitespace():
    assert clean_tokens(["a", "b\u2028c", " d", "e"]) == ["a", "b", "c", "d", "e"]
    assert clean_tokens(["x", "y"]) == ["x", "y"]


MEASURE = textwrap.dedent(
    """
    import resource, sys
    import torch
    torch.set_num_threads(1)  # what --threads 1 does (the library never sets it)
    from spacy_elmo.train import TrainConfig, train
    from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus
    text, out = sys.argv[1], sys.argv[2]
    prepare_corpus(out + "/corpus", [SourceSpec(text, "lines")], progress=False)
    config = TrainConfig(train=[], corpus=[out + "/corpus"], architecture="tiny", max_steps=3, token_budget=1024,
                         threads=1, checkpoint_every=0, vocab_size=5000)
    train(config, out + "/model", progress=False)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """
)


def write_corpus(path: Path, megabytes: int) -> None:
    """Zipf-distributed text over a fixed 20,000-word vocabulary (long words: fewer per MB, a faster test), 14 words a
    sentence, 3 sentences a line."""
    rng = np.random.default_rng(0)
    vocab = np.array([f"lexeme-{i:06d}" for i in range(20000)])
    p = 1.0 / np.arange(1, 20001)
    with open(path, "w", encoding="utf-8") as handle:
        while handle.tell() < megabytes * 1_000_000:
            words = vocab[rng.choice(20000, size=(2000, 14), p=p / p.sum())]
            sentences = [" ".join(row) + " ." for row in words]
            handle.write("".join(" ".join(sentences[i : i + 3]) + "\n" for i in range(0, 2000, 3)))


@pytest.mark.slow
def test_resident_memory_is_flat_in_the_corpus_size(tmp_path):
    """Peak RSS of prepare-corpus + 3 training steps on 50 MB of text vs 5 MB: holding the text (or its tokens) would
    cost at least its 45 MB more (Python strings: several times that); streaming costs only per-shard records."""
    peaks = {}
    for megabytes in (5, 50):
        folder = tmp_path / str(megabytes)
        folder.mkdir()
        write_corpus(folder / "text.txt", megabytes)
        result = subprocess.run(
            [sys.executable, "-c", MEASURE, str(folder / "text.txt"), str(folder)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        peaks[megabytes] = int(result.stdout.split()[-1]) / 1024  # ru_maxrss: KiB on Linux
        assert json.loads((folder / "corpus" / "corpus.json").read_text())["words"] > megabytes * 60_000
    assert peaks[50] - peaks[5] < 20, peaks  # MiB


@pytest.mark.slow
def test_the_cli_trains_on_a_prepared_corpus(wiki_sample, tmp_path):
    out, manifest = wiki_sample
    runner = CliRunner()
    result = runner.invoke(app, ["train", str(tmp_path / "m"), "--arch", "tiny", "--threads", "1", "--no-progress"])
    assert result.exit_code == 2 and "--corpus DIR" in result.output
    args = [
        "train",
        str(tmp_path / "m"),
        "--corpus",
        str(out),
        "--arch",
        "tiny",
        "--max-steps",
        "2",
        "--min-count",
        "1",
    ]
    result = runner.invoke(app, [*args, "--threads", "1", "--token-budget", "256", "--no-progress"])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert metrics["corpus"]["prepared"] == [out.name] and metrics["corpus"]["words"] == manifest["words"]
    (source,) = metrics["stages"][0]["sources"]
    assert source["info"]["repository"] == "github:jason-feng/wikiVisual" and source["words"] == manifest["words"]
    vocab = (tmp_path / "m" / "vocab.txt").read_text("utf-8").split("\n")
    counts = [line.split("\t")[0] for line in (out / "counts.tsv").read_text("utf-8").splitlines()]
    assert vocab[3 : len(counts) + 3] == counts  # the counting pass's order, min count 1: every word


def test_a_failed_run_leaves_none_of_its_shards(tmp_path, monkeypatch):
    """A JSON line over the limit, after shards were written already: one line naming file, line and limit, exit 2,
    and the folder as it was (the shards written before are removed)."""
    from spacy_elmo.train.corpus import layouts

    monkeypatch.setattr(layouts, "MAX_JSON_LINE_CHARS", 1000)
    path = tmp_path / "dump.jsonl"
    path.write_text('{"text": "One. Two. Three."}\n' * 5 + '{"text": "' + "long " * 300 + '"}\n', encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("mine\n")
    args = ["prepare-corpus", str(out), "-s", str(path), "-f", "jsonl", "--shard-sentences", "2", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"error: {path}:6 is a JSON line longer than 1,000 characters, the most read whole: split the record into "
        "several lines\n"
    )
    assert sorted(p.name for p in out.iterdir()) == ["notes.md"]
    monkeypatch.setattr(layouts, "MAX_JSON_LINE_CHARS", 2000)
    assert CliRunner().invoke(app, args).exit_code == 0
    assert len(json.loads((out / "corpus.json").read_text())["shards"]) == 9  # 15 sentences + 1, 2 a shard


LONG_LINE = textwrap.dedent(
    """
    import re, sys
    from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus
    prepare_corpus(sys.argv[2], [SourceSpec(sys.argv[1], "lines")], progress=False)
    # this process's own peak (ru_maxrss would count the parent's resident memory at the fork)
    print(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak from /proc (Linux)")
def test_memory_is_flat_in_the_length_of_a_line(tmp_path):
    """Peak memory of prepare-corpus on 40 MB in one line without a newline (a minified dump) vs 4 MB of ordinary
    lines: the line held whole, and its tokens, would cost hundreds of MB more."""
    peaks = {}
    for megabytes, one_line in ((4, False), (40, True)):
        text = tmp_path / f"{megabytes}.txt"
        write_corpus(text, megabytes)
        if one_line:  # its newlines as spaces, a MB at a time
            with open(text, "rb") as source, open(tmp_path / "one-line.txt", "wb") as target:
                for piece in iter(lambda: source.read(1 << 20), b""):
                    target.write(piece.replace(b"\n", b" "))
            text = tmp_path / "one-line.txt"
        result = subprocess.run(
            [sys.executable, "-c", LONG_LINE, str(text), str(tmp_path / f"corpus-{megabytes}")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=True,
        )
        peaks[megabytes] = int(result.stdout.split()[-1]) / 1024  # MiB
        manifest = json.loads((tmp_path / f"corpus-{megabytes}" / "corpus.json").read_text())
        assert manifest["words"] > megabytes * 60_000
    assert peaks[40] - peaks[4] < 30, peaks  # MiB
