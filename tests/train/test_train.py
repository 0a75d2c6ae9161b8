"""Training a tiny biLM: perplexity falls, export matches the trainer, resume and fine-tuning are exact."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import load_bilm
from spacy_elmo.bilm.weights import load_model
from spacy_elmo.cli import app
from spacy_elmo.train import Trainer, make_sources, train
from spacy_elmo.train.corpus.batching import tensorize
from spacy_elmo.train.corpus.sentences import read_sentences
from spacy_elmo.train.run.evaluation import evaluate, load_language_model
from tests.conftest import torch_threads
from tests.numerics import assert_recomputed_close
from tests.train.conftest import wikitext_lines


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    """A few hundred WikiText-2 lines to train on and a hundred to validate on."""
    return wikitext_lines(data_dir, tmp_path_factory.mktemp("texts"), train=300, valid=100)


@pytest.fixture(scope="module")
def tiny_options():
    """Two epochs of larger batches: far below the uniform baseline in seconds."""
    return dict(min_count=2, epochs=2, token_budget=2048, max_length=50, warmup_steps=5, seed=7)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Train single-threaded as the configs say (threads=1; only the CLI applies it): bit-reproducible and fast."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny_model(texts, tiny_config, tmp_path_factory):
    """A tiny biLM trained for two epochs; returns (directory, metrics)."""
    out = tmp_path_factory.mktemp("tiny")
    metrics = train(tiny_config(*texts), out, progress=False)
    return out, metrics


@pytest.mark.slow
def test_tiny_model_learns_far_below_the_uniform_baseline(tiny_model):
    out, metrics = tiny_model
    vocab_size = metrics["vocab_size"]
    assert len((out / "vocab.txt").read_text().split()) == vocab_size
    epochs = metrics["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]
    for direction in ("forward", "backward"):
        valid = [e[f"valid_ppl_{direction}"] for e in epochs]
        assert valid[-1] < valid[0]
        assert valid[-1] < 0.35 * vocab_size, (valid, vocab_size)
    assert metrics["best"]["valid_ppl_mean"] == min(e["valid_ppl_mean"] for e in epochs)
    assert all(e["tokens_per_s"] > 0 for e in epochs)
    assert metrics["corpus"]["words"] > 10000 and metrics["wall_time_s"] > 0


def test_export_gives_the_trainers_own_activations(tiny_model, texts):
    out, _ = tiny_model
    model, vocab = load_language_model(out)
    sentences = [line.split()[:40] for line in texts[1].read_text().splitlines() if line.strip()][:12]
    batch = tensorize(sentences, vocab)
    with torch.no_grad():
        tokens, forward, backward = model.layers(batch.chars, batch.token_index, batch.lengths)
    backend = load_bilm(out)
    embedded = backend.embed(sentences)
    for row, sentence in enumerate(sentences):
        n = len(sentence)
        span = slice(1, n + 1)  # drop <S> and </S>
        expected = [torch.cat([tokens[row, span]] * 2, -1)]
        expected += [torch.cat([f[row, span], b[row, span]], -1) for f, b in zip(forward, backward)]
        assert_recomputed_close(embedded[row], torch.stack(expected))  # the training graph vs the inference path


def test_exported_files_are_float32_in_the_bilm_tf_layout(tiny_model):
    out, _ = tiny_model
    options = json.loads((out / "options.json").read_text())
    assert options["lstm"]["cell_clip"] is None and options["lstm"]["proj_clip"] is None
    with h5py.File(out / "weights.hdf5", "r") as handle:
        names = []
        handle.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert all(handle[n].dtype == np.float32 for n in names)
        cell, proj = options["lstm"]["dim"], options["lstm"]["projection_dim"]
        w = handle["RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"]
        assert w.shape == (2 * proj, 4 * cell)
        assert handle["char_embed"].shape == (261, options["char_cnn"]["embedding"]["dim"])


def test_trained_softmax_reproduces_the_recorded_validation_perplexity(tiny_model, texts):
    out, metrics = tiny_model
    result = CliRunner().invoke(app, ["evaluate", str(out), str(texts[1]), "--output", str(out / "eval.json")])
    assert result.exit_code == 0, result.output
    evaluated = json.loads((out / "eval.json").read_text())
    best = metrics["best"]
    assert evaluated["forward"] == pytest.approx(best["valid_ppl_forward"], abs=0.01)
    assert evaluated["backward"] == pytest.approx(best["valid_ppl_backward"], abs=0.01)
    assert f"forward {evaluated['forward']:.2f}" in result.output


def test_shared_vocab_perplexity_counts_only_the_words_both_models_know(tiny_model, texts, tmp_path):
    """Perplexities of models with different vocabularies compared on the same predictions: checked against each
    target's log-probability from the softmax's full distribution (``log_prob``), summed by hand."""
    out, _ = tiny_model
    words = (out / "vocab.txt").read_text(encoding="utf-8").splitlines()
    other = tmp_path / "other"  # another model whose vocabulary holds every other word of this one's
    other.mkdir()
    for name in ("options.json", "weights.hdf5"):
        (other / name).write_bytes((out / name).read_bytes())
    kept = set(words[3::2])
    (other / "vocab.txt").write_text("\n".join([*words[:3], *sorted(kept)]) + "\n", encoding="utf-8")
    json_path = tmp_path / "shared.json"
    result = CliRunner().invoke(
        app, ["evaluate", str(out), str(texts[1]), "--shared-vocab", str(other), "--output", str(json_path)]
    )
    assert result.exit_code == 0, result.output
    shared = json.loads(json_path.read_text())
    assert "predictions of words in every vocabulary" in result.output

    model, vocab = load_language_model(out)
    nll = {"forward": 0.0, "backward": 0.0}
    counted = 0
    with torch.inference_mode():
        for tokens in read_sentences(make_sources([texts[1]])[0], max_length=50):  # as trained: split, cut at 50
            batch = tensorize([tokens], vocab)
            _, forward_out, backward_out = model.layers(batch.chars, batch.token_index, batch.lengths)
            row = ["<S>", *tokens, "</S>"]
            for t in range(1, len(row)):  # forward: position t - 1 predicts row[t]; backward: t predicts row[t - 1]
                for direction, top, position, word in (
                    ("forward", forward_out[-1], t - 1, row[t]),
                    ("backward", backward_out[-1], t, row[t - 1]),
                ):
                    if word in ("<S>", "</S>") or (word in kept and word in vocab.index):
                        log_probs = model.softmax.log_prob(top[0, position][None])[0]
                        nll[direction] -= float(log_probs[vocab.index[word]])
                        counted += direction == "forward"
    assert shared["predictions"] == counted
    for direction in ("forward", "backward"):
        assert shared[direction] == pytest.approx(np.exp(nll[direction] / counted), rel=1e-4)
    plain = evaluate(out, [texts[1]])  # every prediction, <UNK> included: more of them, another perplexity
    assert plain["predictions"] > shared["predictions"] and plain["forward"] != pytest.approx(shared["forward"])


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float32", "auto"])
def test_resume_continues_from_the_same_step_and_seed_fixes_the_model(texts, tiny_config, tmp_path, precision):
    """Bit-exact with one thread: always in float32 (the exact path); with auto's choice (bfloat16 mixed precision
    where the CPU has it) on this CPU's deterministic kernels too."""
    config = dict(epochs=2, eval_every=0, checkpoint_every=1, precision=precision)  # no validation
    straight = tmp_path / "straight"
    train(tiny_config(texts[0], **config, max_steps=6), straight, progress=False)
    again = tmp_path / "again"
    train(tiny_config(texts[0], **config, max_steps=6), again, progress=False)
    split = tmp_path / "split"
    train(tiny_config(texts[0], **config, max_steps=3), split, progress=False)
    resumed = Trainer(tiny_config(texts[0], **config, max_steps=6), split, resume=True, progress=False)
    assert resumed.state["step"] == 3
    resumed.run()
    assert resumed.state["step"] == 6

    def weights(directory: Path):
        from spacy_elmo.train.output_folder.storage import load_checkpoint

        state = load_checkpoint(directory / "checkpoint.safetensors")
        return state.model, state.info["state"]["step"]

    (a, step_a), (b, step_b), (c, step_c) = weights(straight), weights(again), weights(split)
    assert step_a == step_b == step_c == 6
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0)  # same seed, same model
        torch.testing.assert_close(a[name], c[name], rtol=0, atol=0)  # interrupted + resumed = straight


def _fast_wall_clock(monkeypatch, seconds_per_reading: float) -> None:
    """The trainer's ``time.time()`` advances ``seconds_per_reading`` at every reading (its other clocks are real)."""
    import spacy_elmo.train.run.trainer as trainer_module

    real = trainer_module.time

    class Clock:
        now = real.time()

        def time(self) -> float:
            Clock.now += seconds_per_reading
            return Clock.now

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(trainer_module, "time", Clock())


def test_a_run_stopped_after_a_checkpoint_keeps_its_wall_time_when_resumed(texts, tiny_config, tmp_path, monkeypatch):
    """The checkpoint holds the run's wall time until then: a killed run, resumed, still counts it (stages, card)."""
    _fast_wall_clock(monkeypatch, 100.0)
    out = tmp_path / "run"
    config = dict(epochs=2, eval_every=0, checkpoint_every=1, max_steps=2)  # no validation
    killed = Trainer(tiny_config(texts[0], **config), out, progress=False)
    monkeypatch.setattr(Trainer, "validate", lambda *args, **kwargs: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # stopped after its step-1 checkpoint, before the run's end
        killed.run()
    monkeypatch.undo()
    from spacy_elmo.train.output_folder.storage import load_checkpoint

    saved = load_checkpoint(out / "checkpoint.safetensors").info
    assert saved["state"]["step"] == 1 and saved["metrics"]["wall_time_s"] >= 100.0  # >= 1 reading of the clock
    resumed = Trainer(tiny_config(texts[0], **{**config, "max_steps": 3}), out, resume=True, progress=False)
    metrics = resumed.run()
    assert metrics["wall_time_s"] >= saved["metrics"]["wall_time_s"]
    assert metrics["stages"][-1]["wall_time_s"] >= saved["metrics"]["wall_time_s"]


def test_max_minutes_and_its_lr_schedule_count_a_resumed_runs_earlier_time(texts, tiny_config, tmp_path, monkeypatch):
    """--max-minutes is the run's budget in all (as --max-steps is): resuming does not restart the decay."""
    _fast_wall_clock(monkeypatch, 60.0)
    config = dict(epochs=2, eval_every=0, checkpoint_every=1, max_minutes=1000.0, warmup_steps=1)  # no validation
    first = Trainer(tiny_config(texts[0], **config, max_steps=2), tmp_path, progress=False)
    first.run()
    elapsed, lr = first.elapsed_s, first.learning_rate()
    assert elapsed >= 120.0 and lr < 0.01  # 2 steps, >= 1 reading of the clock each; decaying
    resumed = Trainer(tiny_config(texts[0], **config, max_steps=3), tmp_path, resume=True, progress=False)
    assert resumed.elapsed_s == pytest.approx(elapsed) and resumed.learning_rate() == pytest.approx(lr)
    resumed.run()
    assert resumed.elapsed_s > elapsed and resumed.learning_rate() < lr
    stopped = Trainer(tiny_config(texts[0], **{**config, "max_minutes": 1.0}), tmp_path, resume=True, progress=False)
    stopped.run()  # the budget was spent before: one step, then the limit
    assert stopped.state["step"] == 4


def test_resume_warns_of_the_options_the_checkpoint_overrides(texts, tiny_config, tmp_path, recwarn):
    config = dict(epochs=1, eval_every=0, max_steps=1)  # no validation
    train(tiny_config(texts[0], **config), tmp_path, progress=False)
    Trainer(tiny_config(texts[0], **{**config, "max_steps": 2}), tmp_path, resume=True, progress=False)
    assert not [w for w in recwarn if "--resume" in str(w.message)]  # the same settings, a longer run: silent
    with pytest.warns(
        UserWarning, match=r"ignored: lr=0\.5 \(the checkpoint's: 0\.01\), seed=3 \(the checkpoint's: 7\)"
    ):
        resumed = Trainer(tiny_config(texts[0], **config, lr=0.5, seed=3), tmp_path, resume=True, progress=False)
    assert resumed.config.lr == 0.01 and resumed.config.seed == 7


def test_resume_without_the_training_files_is_silent(texts, tiny_config, tmp_path, recwarn):
    """``spacy-elmo train OUT --resume`` names no text (the checkpoint finds its own): nothing was given, so no
    option is reported as ignored."""
    config = dict(epochs=1, eval_every=0, max_steps=1)  # no validation
    train(tiny_config(texts[0], **config), tmp_path, progress=False)
    resumed = Trainer(tiny_config(**{**config, "max_steps": 2}), tmp_path, resume=True, progress=False)
    assert not [str(w.message) for w in recwarn if "--resume" in str(w.message)]
    assert resumed.config.train  # the checkpoint's


def test_resume_without_a_checkpoint_is_a_clear_error(texts, tiny_config, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"checkpoint\.safetensors"):
        Trainer(tiny_config(*texts), tmp_path, resume=True)


@pytest.mark.slow
def test_fine_tuning_starts_from_the_released_model(fixture_dir, texts, tiny_config, tmp_path):
    reference = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    trainer = Trainer(tiny_config(*texts, init_from=str(fixture_dir), max_steps=3, epochs=1), tmp_path, progress=False)
    assert trainer.model.lstm_impl == "exact"  # the fixture clips its cells: keep the exact ELMo cell
    sentences = json.loads((fixture_dir / "sentences.json").read_text())
    sentences = [s.split() for group in sentences for s in group]
    from spacy_elmo.bilm.chars import batch_to_char_ids

    ids = torch.as_tensor(batch_to_char_ids(sentences))
    with torch.no_grad():
        before, _, _ = trainer.model.to_bilm()(ids)
        expected, _, _ = reference(ids)
    torch.testing.assert_close(before, expected, rtol=0, atol=0)
    trainer.run()
    tuned = load_bilm(tmp_path)
    options = json.loads((tmp_path / "options.json").read_text())
    assert options["lstm"]["cell_clip"] == 3 and options["lstm"]["proj_clip"] == 3
    after = torch.as_tensor(tuned.embed(sentences[:1])[0])
    start = expected[:, 0, : len(sentences[0])]
    change = (after - start).norm() / start.norm()
    assert 0 < change < 0.5  # moved by three small steps, not re-initialised
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["init_from"]["model"] == fixture_dir.name  # by name: no path of this machine (recorded_paths)
    card = (tmp_path / "README.md").read_text()
    assert f"Initialised from `{fixture_dir.name}`" in card and "clipping 3" in card


def test_cli_trains_and_info_counts_the_file_parameters(texts, tmp_path):
    train_file, valid_file = texts
    out = tmp_path / "cli"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "train",
            str(out),
            "--train",
            str(train_file),
            "--valid",
            str(valid_file),
            "--arch",
            "tiny",
            "--max-steps",
            "2",
            "--threads",
            "1",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert (out / "weights.hdf5").is_file() and (out / "metrics.json").is_file()
    with h5py.File(out / "weights.hdf5", "r") as handle:
        sizes = []
        handle.visititems(lambda name, obj: sizes.append(obj.size) if isinstance(obj, h5py.Dataset) else None)
    info = runner.invoke(app, ["info", str(out)])
    assert info.exit_code == 0, info.output
    assert f"parameters:   {sum(sizes):,}" in info.output
    assert "train.txt" in info.output and "valid ppl" in info.output


def test_cli_reports_bad_input_clearly(tmp_path, fixture_dir):
    runner = CliRunner()
    missing = runner.invoke(app, ["train", str(tmp_path / "out"), "--train", str(tmp_path / "missing.txt")])
    assert missing.exit_code == 2 and "missing.txt" in missing.output
    nothing = runner.invoke(app, ["train", str(tmp_path / "out")])
    assert nothing.exit_code == 2 and "--train" in nothing.output
    (tmp_path / "t.txt").write_text("a b c\n")
    no_softmax = runner.invoke(app, ["evaluate", str(fixture_dir), str(tmp_path / "t.txt")])
    assert no_softmax.exit_code == 2 and "softmax" in no_softmax.output
    bad_arch = runner.invoke(
        app, ["train", str(tmp_path / "out"), "--train", str(tmp_path / "t.txt"), "--arch", "huge"]
    )
    assert bad_arch.exit_code == 2 and "huge" in bad_arch.output


PEER_PYTHON = Path("/tmp/peer-venv/bin/python")


@pytest.mark.slow
@pytest.mark.skipif(not PEER_PYTHON.is_file(), reason="the AllenNLP 0.9 peer venv (/tmp/peer-venv) is not built")
def test_allennlp_loads_the_exported_model_and_agrees(tiny_model, tmp_path):
    import subprocess

    out, _ = tiny_model
    oracle = Path(__file__).resolve().parents[2].parent / "shared" / "peers" / "allennlp_oracle.py"
    if not oracle.is_file():
        pytest.skip(f"AllenNLP oracle not found at {oracle}")
    sentences = [["The", "bank", "approved", "the", "loan", "."], ["He", "sat", "on", "the", "river", "bank"], ["Hi"]]
    (tmp_path / "sents.json").write_text(json.dumps(sentences))
    subprocess.run(
        [
            str(PEER_PYTHON),
            str(oracle),
            "run",
            str(out / "options.json"),
            str(out / "weights.hdf5"),
            str(tmp_path / "sents.json"),
            str(tmp_path / "ref"),
            "--no-stateful",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    ours = load_bilm(out).embed(sentences)
    for i, array in enumerate(ours):
        np.testing.assert_allclose(array, np.load(tmp_path / "ref" / f"sent_{i:05d}.npy"), atol=1e-5, rtol=0)


def test_model_card_shows_the_command_as_typed():
    from spacy_elmo.train.output_folder.model_card import display_command

    assert display_command("/x/spacy_elmo/__main__.py train out --seed 0") == "python -m spacy_elmo train out --seed 0"
    assert display_command("/venv/bin/spacy-elmo train 'my dir'") == "spacy-elmo train my dir"


def test_the_run_says_when_it_validates_and_writes_the_model(texts, tiny_config, tmp_path, capsys):
    """Long phases between the progress bar's steps say what they do (tqdm.write, on stdout), unless it is hidden."""
    out = tmp_path / "shown"
    Trainer(tiny_config(*texts, max_steps=2, epochs=1), out, progress=True).run()
    shown = capsys.readouterr().out.splitlines()
    validating = shown.index("step 2: computing the validation perplexity")
    assert shown[validating + 1].startswith("step 2: ") and "valid_ppl_mean=" in shown[validating + 1]
    assert shown[validating + 2] == f"step 2: the best model so far: writing it to {out}"
    assert (out / "weights.hdf5").is_file()
    Trainer(tiny_config(*texts, max_steps=2, epochs=1), tmp_path / "quiet", progress=False).run()
    assert not capsys.readouterr().out
