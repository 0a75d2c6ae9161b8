"""`spacy-elmo adapt`: domain adaptation of the biLM's LM on a .spacy corpus's text, usable by the elmo component."""

import json
import signal
import subprocess
import sys

import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.spacy.adapt import ADAPTATION, doc_lines
from tests.spacy.test_spacy_training import TEXTS, write_corpus


def test_doc_lines_are_the_docs_tokens_without_whitespace(tmp_path):
    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    assert list(doc_lines(corpus)) == [text for text, _ in TEXTS]


def test_adapt_writes_a_model_the_elmo_component_loads(tmp_path):
    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    out = tmp_path / "adapted"
    result = CliRunner().invoke(
        app,
        [
            "adapt",
            str(out),
            "--train",
            str(corpus),
            "--dev",
            str(corpus),
            "--epochs",
            "3",
            "--max-steps",
            "3",
            "--token-budget",
            "256",
        ],
    )
    assert result.exit_code == 0, result.output
    record = json.loads((out / ADAPTATION).read_text())
    before, after = record["dev_perplexity_before"]["mean"], record["dev_perplexity_after"]["mean"]
    assert record["steps"] == 3 and record["n_train_docs"] == len(TEXTS)
    for written in (ADAPTATION, "metrics.json"):  # files named by name, never by this machine's folders
        assert str(tmp_path) not in (out / written).read_text(), written
    assert record["train_docs"] == corpus.name
    assert after < before  # three steps on the dev text itself lower its perplexity
    assert f"{before:.2f} -> {after:.2f}" in result.output
    said = [line for line in result.output.splitlines() if "dev perplexity" in line or "fine-tuning" in line]
    assert said[:2] == [
        f"dev perplexity of default before adapting ({len(TEXTS)} dev docs)",
        f"fine-tuning default on the text of {len(TEXTS)} training docs, then the dev perplexity after",
    ]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(out)})
    default = spacy.blank("en")
    default.add_pipe("elmo")
    text = TEXTS[0][0]
    adapted_layers, default_layers = nlp(text)._.elmo_layers, default(text)._.elmo_layers
    assert adapted_layers.shape == default_layers.shape and not np.allclose(adapted_layers, default_layers)


def test_adapt_names_a_corpus_without_text(tmp_path):
    from spacy.tokens import DocBin

    DocBin().to_disk(tmp_path / "empty.spacy")
    result = CliRunner().invoke(
        app,
        [
            "adapt",
            str(tmp_path / "out"),
            "--train",
            str(tmp_path / "empty.spacy"),
            "--dev",
            str(tmp_path / "empty.spacy"),
        ],
    )
    assert result.exit_code == 2 and "no docs with text" in result.output


def test_adapt_refuses_a_published_model_before_downloading_it(tmp_path):
    """Published models ship no vocabulary or softmax, so they cannot be adapted: say so first, fetch nothing."""
    from spacy_elmo.sources.published import PUBLISHED

    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    home = tmp_path / "home"
    for name in ("small", "manylangs-fi", PUBLISHED["original"].options_url):
        result = CliRunner().invoke(
            app,
            ["adapt", str(tmp_path / "out"), "--train", str(corpus), "--dev", str(corpus), "--init-from", name],
            env={"SPACY_ELMO_HOME": str(home), "SPACY_ELMO_OFFLINE": "1"},  # a download would fail differently
        )
        assert result.exit_code == 2, result.output
        assert "published models cannot be adapted" in result.output and "'default'" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    typo = CliRunner().invoke(
        app, ["adapt", str(tmp_path / "out"), "--train", str(corpus), "--dev", str(corpus), "--init-from", "defualt"]
    )
    assert typo.exit_code == 2 and "did you mean 'default'?" in typo.output, typo.output
    assert not (tmp_path / "out").exists() and not home.exists()


def _adapt_args(out, corpus, *extra):
    return ["adapt", str(out), "--train", str(corpus), "--dev", str(corpus), "--max-steps", "2", *extra]


def _another_model(folder, fixture_dir):
    """A folder holding another model (the AllenNLP fixture, its weights under their own name); its files' bytes."""
    import shutil

    shutil.copytree(fixture_dir, folder)
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_adapt_refuses_a_folder_holding_another_model(tmp_path, fixture_dir):
    """adapt replaced options.json and README of the folder's model and left its weights beside the new ones."""
    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    out = tmp_path / "model"
    before = _another_model(out, fixture_dir)
    result = CliRunner().invoke(app, _adapt_args(out, corpus))
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {out} already holds a model (") and "pass --overwrite" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written, nothing removed


@pytest.mark.slow
def test_adapt_overwrite_replaces_the_whole_model(tmp_path, fixture_dir):
    from spacy_elmo import load_bilm

    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    out = tmp_path / "model"
    _another_model(out, fixture_dir)
    result = CliRunner().invoke(app, _adapt_args(out, corpus, "--overwrite"))
    assert result.exit_code == 0, result.output
    assert not (out / "lm_weights.hdf5").exists()  # the replaced model's weights are gone, not left beside
    assert load_bilm(out).dim == load_bilm("default").dim != load_bilm(fixture_dir).dim


_DISK_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as one on a full disk
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from spacy_elmo.cli import app
app(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits")
def test_a_full_disk_while_adapting_leaves_the_previous_model_whole(tmp_path, fixture_dir):
    """A 175-line traceback, and the folder's previous model no longer loaded (its options were replaced first)."""
    from spacy_elmo import load_bilm

    corpus = write_corpus(tmp_path / "data.spacy", "textcat")
    out = tmp_path / "model"
    before = _another_model(out, fixture_dir)
    args = _adapt_args(out, corpus, "--overwrite", "--no-progress")  # stderr: the error alone
    done = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, str(4_000_000), *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write {out}/") and line.endswith("file too large (errno EFBIG)"), line
    kept = {name: (out / name).read_bytes() for name in before}
    assert kept == before  # the previous model's files, byte for byte
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left
    assert load_bilm(out).dim == load_bilm(fixture_dir).dim
