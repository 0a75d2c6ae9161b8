"""Trainer files are never unpickled, bad files and input fail clearly, a diverging run saves nothing bad."""

import dataclasses
import json
import math
import pickle
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from spacy_elmo.bilm.weights import WeightFileError
from spacy_elmo.cli import app
from spacy_elmo.runtime.embedding.backend import DEFAULT_MODEL_DIR
from spacy_elmo.train import TrainConfig, Trainer, train
from spacy_elmo.train.config import option_flags
from spacy_elmo.train.corpus.shards import KIND, VERSION
from spacy_elmo.train.output_folder.storage import TrainingFileError, load_checkpoint, load_softmax
from spacy_elmo.train.run.evaluation import load_language_model, perplexity
from spacy_elmo.train.run.trainer import TrainingDiverged, _number
from tests.conftest import torch_threads


class WritesMarker:
    """Unpickling this creates ``path``: stands in for any code a crafted pickle would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Train single-threaded (reproducible, and fast on small CPUs); torch's setting is restored after each test."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    """Eighty WikiText-2 lines to train on, twenty to validate on, an empty and a blank file."""
    root = tmp_path_factory.mktemp("safety-texts")
    wiki = data_dir / "wikitext-2"
    lines = [line for line in (wiki / "train.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    (root / "train.txt").write_text("\n".join(lines[:80]) + "\n", encoding="utf-8")
    valid = [line for line in (wiki / "valid.txt").read_text(encoding="utf-8").splitlines() if line.strip()]
    (root / "valid.txt").write_text("\n".join(valid[:20]) + "\n", encoding="utf-8")
    (root / "empty.txt").write_text("", encoding="utf-8")
    (root / "blank.txt").write_text("  \n\n \t\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tiny_options():
    """One epoch of small batches, a checkpoint at every step."""
    return dict(epochs=1, token_budget=1024, max_length=40, checkpoint_every=1)


@pytest.fixture(scope="module")
def trained(texts, tiny_config, tmp_path_factory):
    """A tiny model trained for three steps (checkpoint, softmax and weights written)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("safety-trained")
    train(tiny_config(texts / "train.txt", max_steps=3), out, progress=False)
    torch.set_num_threads(saved)
    return out


def copy_run(run: Path, texts: Path, target: Path) -> None:
    """A copy of the run folder ``run`` at ``target``, with its text beside it as the text was beside the run: a
    checkpoint finds its text from its own folder (train/output_folder/recorded_paths)."""
    import os
    import shutil

    shutil.copytree(run, target)
    beside = target.parent / os.path.relpath(texts, run.parent)
    if not beside.exists():
        beside.parent.mkdir(parents=True, exist_ok=True)
        beside.symlink_to(texts, target_is_directory=True)


def cli_train(out: Path, *args: str):
    return CliRunner().invoke(app, ["train", str(out), "--arch", "tiny", "--no-progress", "--threads", "1", *args])


def legacy_checkpoint(path: Path, marker: Path) -> None:
    """An old-style torch.save checkpoint whose config runs code when it is unpickled."""
    torch.save({"config": WritesMarker(marker), "model": {}, "state": {"step": 1}}, path)


def test_the_crafted_pickle_really_runs_code_when_unpickled(tmp_path):
    """The payload used below is live: a loader that unpickled it would create the marker."""
    marker = tmp_path / "ran"
    legacy_checkpoint(tmp_path / "checkpoint.pt", marker)
    assert not marker.exists()
    torch.load(tmp_path / "checkpoint.pt", weights_only=False)  # what --resume used to do
    assert marker.exists()


def test_resume_refuses_a_legacy_pickle_checkpoint_without_running_it(texts, tiny_config, tmp_path):
    marker = tmp_path / "ran"
    legacy_checkpoint(tmp_path / "checkpoint.pt", marker)
    with pytest.raises(TrainingFileError, match=r"checkpoint\.pt is a training checkpoint in the pickle format"):
        Trainer(tiny_config(texts / "train.txt"), tmp_path, resume=True, progress=False)
    result = cli_train(tmp_path, "--resume")
    assert result.exit_code == 2 and "error:" in result.output and "checkpoint.pt" in result.output, result.output
    assert not marker.exists()


@pytest.mark.parametrize("flavour", ["torch.save", "pickle"])
def test_resume_refuses_a_pickle_under_the_new_name_without_running_it(texts, tiny_config, tmp_path, flavour):
    marker = tmp_path / "ran"
    path = tmp_path / "checkpoint.safetensors"
    if flavour == "torch.save":
        legacy_checkpoint(path, marker)
    else:
        path.write_bytes(pickle.dumps({"config": WritesMarker(marker)}))
    with pytest.raises(TrainingFileError, match=f"{path}.* pickle"):
        Trainer(tiny_config(texts / "train.txt"), tmp_path, resume=True, progress=False)
    assert not marker.exists()


def test_resume_names_an_empty_truncated_corrupt_or_foreign_checkpoint(texts, tiny_config, trained, tmp_path):
    good = (trained / "checkpoint.safetensors").read_bytes()
    foreign = tmp_path / "foreign.safetensors"
    save_file({"weight": torch.zeros(3)}, str(foreign), metadata={"format": "pt"})
    incomplete = tmp_path / "incomplete.safetensors"
    save_file(
        {"rng.torch": torch.get_rng_state()},
        str(incomplete),
        metadata={"format": "spacy-elmo checkpoint", "version": "1", "json": json.dumps({"config": {}})},
    )
    cases = {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "corrupt": bytes(range(256)) * 4,
        "foreign": foreign.read_bytes(),
        "incomplete": incomplete.read_bytes(),
    }
    for name, data in cases.items():
        out = tmp_path / name
        out.mkdir()
        path = out / "checkpoint.safetensors"
        path.write_bytes(data)
        with pytest.raises(TrainingFileError, match=str(path)):
            Trainer(tiny_config(texts / "train.txt"), out, resume=True, progress=False)
        result = cli_train(out, "--resume")
        assert result.exit_code == 2, (name, result.output)
        assert result.output.count("error:") == 1 and str(path) in result.output, (name, result.output)
        assert "Traceback" not in result.output and "Aborted" not in result.output, (name, result.output)


def test_checkpoint_holds_no_pickle_and_round_trips_the_optimizer(trained):
    path = trained / "checkpoint.safetensors"
    assert path.read_bytes()[:2] != b"PK" and b"\x80\x04\x95" not in path.read_bytes()[:16]
    checkpoint = load_checkpoint(path)
    assert checkpoint.info["state"]["step"] == 3 and checkpoint.info["vocab"][:3] == ["<S>", "</S>", "<UNK>"]
    # (its text's paths are the way from the run's folder, not from here: named none, the checkpoint finds its own)
    kept = {**checkpoint.info["config"], "train": [], "valid": []}
    resumed = Trainer(TrainConfig(**kept), trained, resume=True, progress=False)
    saved, restored = checkpoint.optimizer, resumed.optimizer.state_dict()
    assert saved["param_groups"] == restored["param_groups"]
    assert len(restored["state"]) == sum(1 for _ in resumed.model.parameters())
    for index, entry in restored["state"].items():
        assert set(entry) == {"step", "exp_avg", "exp_avg_sq"}
        for key, value in entry.items():
            torch.testing.assert_close(value, saved["state"][index][key], rtol=0, atol=0)


def test_trainer_files_are_not_world_unreadable(trained):
    for name in ("checkpoint.safetensors", "softmax.safetensors"):
        assert (trained / name).stat().st_mode & 0o044 == (trained / "vocab.txt").stat().st_mode & 0o044, name


def test_the_bundled_softmax_is_safetensors_and_scores_text():
    if not (DEFAULT_MODEL_DIR / "options.json").is_file():
        pytest.skip("the bundled default model is not in this checkout")
    assert not (DEFAULT_MODEL_DIR / "softmax.pt").exists()
    softmax = load_softmax(DEFAULT_MODEL_DIR / "softmax.safetensors")
    assert softmax.n_classes == 80000 and softmax.cutoffs == [2000, 10000, 40000] and softmax.div_value == 2.0
    assert softmax.state_dict["head.weight"].shape == (2003, 128)  # 2,000 words + 3 tail clusters
    model, vocab = load_language_model("default")
    assert len(vocab) == softmax.n_classes and model.softmax.n_classes == softmax.n_classes


def test_a_legacy_softmax_pickle_is_refused_by_evaluate_and_fine_tuning(texts, tiny_config, trained, tmp_path):
    model_dir = tmp_path / "old-model"
    model_dir.mkdir()
    for name in ("options.json", "weights.hdf5", "vocab.txt"):
        (model_dir / name).write_bytes((trained / name).read_bytes())
    marker = tmp_path / "ran"
    torch.save({"state_dict": WritesMarker(marker), "n_classes": 5}, model_dir / "softmax.pt")
    with pytest.raises(TrainingFileError, match=r"softmax\.pt is the model's softmax in the pickle format"):
        load_language_model(model_dir)
    result = CliRunner().invoke(app, ["evaluate", str(model_dir), str(texts / "valid.txt")])
    assert result.exit_code == 2 and "softmax.pt" in result.output, result.output
    with pytest.raises(TrainingFileError, match=r"softmax\.pt"):
        Trainer(tiny_config(texts / "train.txt", init_from=str(model_dir)), tmp_path / "tuned", progress=False)
    assert not marker.exists()


def test_a_corrupt_softmax_names_the_file(texts, trained, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for name in ("options.json", "weights.hdf5", "vocab.txt"):
        (model_dir / name).write_bytes((trained / name).read_bytes())
    (model_dir / "softmax.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(WeightFileError, match=r"softmax\.safetensors"):
        load_language_model(model_dir)


def test_a_huge_learning_rate_stops_with_a_clear_error_and_exports_nothing(texts, tmp_path):
    for extra in ([], ["--valid", str(texts / "valid.txt")]):
        out = tmp_path / f"run{len(extra)}"
        result = cli_train(out, "--train", str(texts / "train.txt"), "--lr", "1e30", "--checkpoint-every", "1", *extra)
        assert result.exit_code == 2, result.output
        assert "error: training diverged at step 2" in result.output and "--lr" in result.output, result.output
        assert "checkpoint.safetensors of step 1" in result.output and "no exported model" in result.output
        assert not (out / "weights.hdf5").exists() and not (out / "README.md").exists()
        assert "saved to" not in result.output
        kept = load_checkpoint(out / "checkpoint.safetensors")
        assert kept.info["state"]["step"] == 1
        assert all(bool(torch.isfinite(t).all()) for t in kept.model.values())


def test_divergence_after_a_good_export_keeps_that_export(texts, tiny_config, tmp_path, monkeypatch):
    """A non-finite validation perplexity: the exported files stay those of the last good evaluation."""
    import spacy_elmo.train.run.trainer as trainer_module

    trainer = Trainer(
        tiny_config(texts / "train.txt", texts / "valid.txt", eval_every=2, max_steps=6), tmp_path, progress=False
    )
    real = trainer_module.perplexities
    calls = []

    def failing_later(*args, **kwargs):
        calls.append(1)
        result = real(*args, **kwargs)
        return result if len(calls) == 1 else {**result, "forward": math.inf, "mean": math.inf}

    monkeypatch.setattr(trainer_module, "perplexities", failing_later)
    with pytest.raises(TrainingDiverged, match="validation perplexity is inf"):
        trainer.run()
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["best"]["step"] == 2 and len(metrics["evaluations"]) == 1
    arrays = []
    with h5py.File(tmp_path / "weights.hdf5", "r") as handle:
        handle.visititems(lambda name, obj: arrays.append(obj[()]) if isinstance(obj, h5py.Dataset) else None)
    assert arrays and all(np.isfinite(a).all() for a in arrays)


def test_huge_losses_do_not_crash_the_progress_display(texts, tiny_config, tmp_path):
    assert perplexity(1e6) == math.inf and math.isnan(perplexity(math.nan)) and perplexity(0.0) == 1.0
    assert _number(math.inf, 1) == "inf" and _number(1e300, 1) == "1e+300" and _number(12.345, 1) == "12.3"
    out = tmp_path / "progress"
    with pytest.raises(TrainingDiverged, match="training loss is"):
        train(tiny_config(texts / "train.txt", lr=1e6, warmup_steps=1, max_steps=5), out, progress=True)
    result = cli_train(tmp_path / "quiet", "--train", str(texts / "train.txt"), "--lr", "1e6", "--max-steps", "5")
    assert result.exit_code == 2 and "OverflowError" not in result.output and "diverged" in result.output, result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--train", "{empty}"], "--train/--raw: nothing to train on: no tokens in {empty}"),
        (["--train", "{blank}"], "--train/--raw: nothing to train on: no tokens in {blank}"),
        (["--train", "{train}", "--valid", "{empty}"], "--valid: nothing to validate on: no tokens in {empty}"),
        (["--train", "{train}", "--valid", "{blank}"], "--valid: nothing to validate on: no tokens in {blank}"),
        (["--train", "{train}", "--epochs", "0"], "--epochs must be a number > 0, not 0.0"),
        (["--train", "{train}", "--max-length", "0"], "--max-length must be at least 1, not 0"),
        (["--train", "{train}", "--token-budget", "0"], "--token-budget must be at least 1, not 0"),
        (["--train", "{train}", "--lr", "0"], "--lr must be a number > 0 that float32 holds (at most 3.4e38), not 0.0"),
        (["--train", "{train}", "--lr-schedule", "cosine"], "--lr-schedule must be linear or constant, not 'cosine'"),
        (["--train", "{train}", "--lstm-impl", "cudnn"], "--lstm-impl must be auto, fused or exact, not 'cudnn'"),
        (["--train", "{train}", "--lr", "1e300"], "--lr must be a number > 0 that float32 holds"),
        (["--train", "{train}", "--div-value", "1e30"], "div_value 1e+30 leaves tail cluster 1's projection no width"),
    ],
)
def test_bad_training_input_is_refused_before_training(texts, tmp_path, args, message):
    names = {"train": texts / "train.txt", "empty": texts / "empty.txt", "blank": texts / "blank.txt"}
    out = tmp_path / "out"
    result = cli_train(out, *(a.format(**names) for a in args))
    assert result.exit_code == 2, result.output
    assert f"error: {message.format(**names)}" in " ".join(result.output.split()), result.output
    assert "saved to" not in result.output and not out.exists()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"lr_schedule": "cosine"}, "--lr-schedule must be linear or constant, not 'cosine'"),
        ({"lstm_impl": "cudnn"}, "--lstm-impl must be auto, fused or exact, not 'cudnn'"),
        ({"min_count": 0}, "--min-count must be at least 1, not 0"),
    ],
)
def test_the_python_api_refuses_what_the_cli_refuses(texts, tiny_config, tmp_path, overrides, message):
    """check_config is the one validator: a TrainConfig built in Python gets the CLI's checks and messages."""
    with pytest.raises(ValueError, match=message):
        Trainer(tiny_config(texts / "train.txt", **overrides), tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def _train_command():
    import typer.main

    return typer.main.get_command(app).commands["train"]


def test_every_train_config_field_is_a_cli_option_with_its_default():
    """One place per training option: each TrainConfig field is a `spacy-elmo train` option (its flag from the
    field) whose default is the field's; train, valid and corpus are the command's --train, --valid, --corpus."""
    by_flag = {flag: param for param in _train_command().params for flag in param.opts}
    for field in dataclasses.fields(TrainConfig):
        flag = option_flags(field)[0]
        assert flag in by_flag, f"TrainConfig.{field.name} has no `spacy-elmo train` option {flag}"
        cli_default = by_flag[flag].default
        if field.default is dataclasses.MISSING:  # the source lists: empty unless given
            assert cli_default in ([], None, ()), f"{flag} defaults to {cli_default!r}"
        elif field.name == "cutoffs":  # given as text: "2000,10000"
            assert tuple(int(c) for c in cli_default.split(",")) == field.default
        else:
            assert cli_default == field.default, f"{flag} defaults to {cli_default!r}, TrainConfig to {field.default!r}"
    assert option_flags(next(f for f in dataclasses.fields(TrainConfig) if f.name == "architecture"))[:2] == (
        "--arch",
        "-a",
    )


# a value other than the default for each TrainConfig field the train command sets through its option
_GIVEN = {
    "architecture": ("tiny", "tiny"),
    "vocab_size": ("123", 123),
    "min_count": ("2", 2),
    "epochs": ("2.5", 2.5),
    "token_budget": ("512", 512),
    "lr": ("0.01", 0.01),
    "lr_schedule": ("constant", "constant"),
    "min_lr_ratio": ("0.5", 0.5),
    "warmup_steps": ("7", 7),
    "clip_norm": ("0.5", 0.5),
    "dropout": ("0.25", 0.25),
    "seed": ("11", 11),
    "max_length": ("33", 33),
    "cutoffs": ("50, 70", (50, 70)),
    "div_value": ("4", 4.0),
    "eval_every": ("9", 9),
    "checkpoint_every": ("13", 13),
    "max_steps": ("17", 17),
    "max_minutes": ("1.5", 1.5),
    "threads": ("1", 1),
    "lstm_impl": ("exact", "exact"),
    "init_from": ("some/model", "some/model"),
    "buffer_size": ("99", 99),
    "precision": ("float32", "float32"),
    "continue_corpus": (None, True),  # a flag: given without a value
}


class _ConfigSeen(Exception):
    pass


def _config_of(monkeypatch, tmp_path, *args) -> TrainConfig:
    """The TrainConfig `spacy-elmo train ... ARGS` hands to the Trainer (which is stopped there)."""
    seen = []

    def trainer(config, *_, **__):
        seen.append(config)
        raise _ConfigSeen

    monkeypatch.setattr("spacy_elmo.train.run.launch.Trainer", trainer)
    result = CliRunner().invoke(app, ["--debug", "train", str(tmp_path / "out"), *args])  # --debug: raised as is
    assert isinstance(result.exception, _ConfigSeen), result.output
    return seen[0]


def test_the_cli_passes_every_option_to_its_train_config_field(texts, monkeypatch, tmp_path):
    """Nothing given: TrainConfig's defaults; every option given: its field gets the value (cutoffs parsed)."""
    train_files = ["--train", str(texts / "train.txt")]
    defaults = _config_of(monkeypatch, tmp_path, *train_files)
    assert defaults == TrainConfig(train=defaults.train)
    assert defaults.train and not defaults.valid and not defaults.corpus
    options = [f for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING]
    assert set(_GIVEN) == {f.name for f in options}, "give the new TrainConfig field a value in _GIVEN"
    args = [arg for f in options for arg in (option_flags(f)[0], _GIVEN[f.name][0]) if arg is not None]
    # --corpus and --init-from name what exists (the command checks both before torch is imported)
    monkeypatch.chdir(tmp_path)
    (tmp_path / _GIVEN["init_from"][0]).mkdir(parents=True)
    manifest = {"format": KIND, "version": VERSION, "shards": [], "words": 0, "sentences": 0, "distinct_words": 0}
    (tmp_path / "corpus.json").write_text(json.dumps(manifest), encoding="utf-8")
    given = _config_of(monkeypatch, tmp_path, *train_files, "--corpus", str(tmp_path), *args)  # --continue-corpus
    assert {f.name: getattr(given, f.name) for f in options} == {name: value for name, (_, value) in _GIVEN.items()}
    assert given.train == defaults.train


def test_the_trainer_leaves_torch_threads_alone_and_the_cli_sets_them(texts, tiny_config, tmp_path):
    lib = tmp_path / "lib"
    Trainer(tiny_config(texts / "train.txt", threads=3, max_steps=1), lib, progress=False)  # where it used to set them
    assert torch.get_num_threads() == 1
    torch.set_num_threads(2)
    result = cli_train(tmp_path / "cli", "--train", str(texts / "train.txt"), "--max-steps", "1")
    assert result.exit_code == 0, result.output
    assert torch.get_num_threads() == 1


def test_resume_names_a_checkpoint_whose_contents_are_malformed(texts, tiny_config, trained, tmp_path):
    """The right format with wrong contents (crafted or from a bug) is still one clear error naming the file."""
    from safetensors import safe_open

    with safe_open(str(trained / "checkpoint.safetensors"), "pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (safe_open is not iterable)
        info = json.loads(handle.metadata()["json"])
    bad_adam = {**tensors, "optimizer.0.exp_avg": torch.zeros(2, 2)}
    cases = {
        "state": (tensors, {**info, "state": {"step": "three"}}),
        "vocab": (tensors, {**info, "vocab": 42}),
        "config": (tensors, {**info, "config": {**info["config"], "lr": "fast"}}),
        "sources": (tensors, {**info, "config": {**info["config"], "train": [{"no": "path"}]}}),
        "weights": ({k: v for k, v in tensors.items() if not k.startswith("model.lstm")}, info),
        "adam": (bad_adam, info),
        "rng": ({**tensors, "rng.torch": torch.zeros(3, dtype=torch.uint8)}, info),
    }
    (tmp_path / texts.name).symlink_to(texts)  # beside each case's folder as beside the run's (its checkpoint's way)
    for name, (case_tensors, case_info) in cases.items():
        out = tmp_path / name
        out.mkdir()
        path = out / "checkpoint.safetensors"
        metadata = {"format": "spacy-elmo checkpoint", "version": "1", "json": json.dumps(case_info)}
        save_file({k: v.contiguous() for k, v in case_tensors.items()}, str(path), metadata=metadata)
        with pytest.raises(TrainingFileError, match=str(path)):
            Trainer(tiny_config(texts / "train.txt"), out, resume=True, progress=False)


def test_metrics_and_model_card_survive_a_write_that_fails_halfway(texts, trained, tmp_path, monkeypatch):
    """A full disk while recording a result or refreshing the card leaves metrics.json and README.md whole."""
    from pathlib import Path as PathType

    from spacy_elmo.train.output_folder.model_card import write_model_card
    from spacy_elmo.train.run.evaluation import record_result

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    write_model_card(model)
    before = {name: (model / name).read_text(encoding="utf-8") for name in ("metrics.json", "README.md")}
    real_write_text = PathType.write_text

    def half_then_full(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PathType, "write_text", half_then_full)
    with pytest.raises(OSError, match=r"cannot write .*metrics\.json: no space left on device \(errno ENOSPC\)"):
        record_result(model, "test", {"forward": 1.0, "backward": 2.0, "mean": 1.5})
    with pytest.raises(OSError, match=r"cannot write .*README\.md: no space left on device \(errno ENOSPC\)"):
        write_model_card(model)
    monkeypatch.undo()
    after = {name: (model / name).read_text(encoding="utf-8") for name in before}
    assert after == before
    json.loads(after["metrics.json"])


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_a_new_run_refuses_a_folder_holding_another_model(texts, tiny_config, trained, tmp_path):

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    before = _files(model)
    result = cli_train(model, "--train", str(texts / "train.txt"), "--max-steps", "1")
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert message.startswith(f"error: {model} already holds a model (")
    assert "continue its run with --resume, or pass --overwrite" in message
    with pytest.raises(ValueError, match="already holds a model"):
        Trainer(tiny_config(texts / "train.txt", max_steps=1), model, progress=False)
    assert _files(model) == before


def test_an_export_that_fails_leaves_the_previous_model_whole(texts, tiny_config, trained, tmp_path, monkeypatch):
    """Options were written before the weights and the softmax: a full disk between them left a folder whose model
    no longer loaded. The model's files are now replaced together, once all of them are written."""
    import errno

    from spacy_elmo.output.write_guard import WriteFailedError
    from spacy_elmo.train.run import outputs

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    kept = {name: data for name, data in _files(model).items() if name != "checkpoint.safetensors"}

    def full_disk(softmax, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputs, "save_softmax", full_disk)
    with pytest.raises(WriteFailedError, match=r"cannot write .*softmax\.safetensors: no space left on device"):
        train(tiny_config(texts / "train.txt", max_steps=1), model, progress=False, overwrite=True)
    assert {name: data for name, data in _files(model).items() if name in kept} == kept
    assert not [name for name in _files(model) if name.endswith(".tmp")]


_FILE_SIZE_LIMIT = """
import resource, signal, sys
from pathlib import Path
import torch
from spacy_elmo.train.output_folder.storage import write_tensor_file
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as one on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
write_tensor_file(Path(sys.argv[1]), {"w": torch.ones(100_000)}, "spacy-elmo checkpoint", {})
"""


def test_a_full_disk_while_writing_a_tensor_file_names_it_and_keeps_the_old_one(tmp_path):
    """safetensors raised its own SafetensorError ("File too large", no file named): a 105-line traceback."""
    import subprocess
    import sys

    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(b"the previous checkpoint")
    done = subprocess.run([sys.executable, "-c", _FILE_SIZE_LIMIT, str(path)], capture_output=True, text=True)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    error = "spacy_elmo.groundwork.atomic_write.WriteFailedError"
    assert last == f"{error}: cannot write {path}: file too large (errno EFBIG)", last
    assert path.read_bytes() == b"the previous checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left


@pytest.mark.parametrize("name", ["checkpoint.safetensors", "softmax.safetensors"])
def test_a_full_disk_while_training_is_one_line_and_exit_2(texts, trained, tmp_path, monkeypatch, name):
    """A checkpoint or softmax that the disk refuses: one line naming it, exit 2, the previous files whole."""

    from safetensors import SafetensorError

    from spacy_elmo.train.output_folder import storage

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    before = _files(model)
    real_save_file = storage.save_file

    def full_disk(tensors, filename, metadata=None):
        if metadata["format"] == ("spacy-elmo checkpoint" if name.startswith("checkpoint") else "spacy-elmo softmax"):
            Path(filename).write_bytes(b"part of the file")
            # what safetensors raises when the disk is full (its Rust I/O error as text)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        real_save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(storage, "save_file", full_disk)
    result = cli_train(model, "--resume", "--max-steps", "4")
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: cannot write {model / name}: no space left on device (errno ENOSPC)"
    )
    assert (model / name).read_bytes() == before[name]
    assert not [p for p in _files(model) if p.endswith(".tmp")]


@pytest.mark.parametrize(
    "message",
    [
        "Error while serializing: I/O error: No space left on device (os error 28)",
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
    ],
    ids=["newer-safetensors", "safetensors-0.4"],
)
def test_a_safetensors_write_error_is_the_operating_systems_in_every_spelling(message):
    from safetensors import SafetensorError

    from spacy_elmo.train.output_folder.storage import _os_error

    error = _os_error(SafetensorError(message))
    assert isinstance(error, OSError) and error.errno == 28
    other = SafetensorError("Error while serializing: tensor invalid")
    assert _os_error(other) is other


def _pid_of_an_ended_process() -> int:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)


def test_resume_removes_the_temporaries_of_killed_runs(texts, trained, tmp_path):
    """A SIGKILL during a checkpoint write left its hidden temporary, checkpoint-sized, which --resume never
    removed (two after four kills). A live process's temporary stays."""
    import os

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    size = (model / "checkpoint.safetensors").stat().st_size
    dead = [
        model / f".checkpoint.safetensors.{_pid_of_an_ended_process()}.0123abcd.tmp",
        model / f"..softmax.safetensors.{_pid_of_an_ended_process()}.89abcdef.tmp.{os.getpid()}.00ff00ff.tmp",
    ]
    alive = model / f".checkpoint.safetensors.{os.getppid()}.4567cdef.tmp"  # pytest's parent: running
    for path in (*dead, alive):
        path.write_bytes(b"\0" * size)
    result = cli_train(model, "--resume", "--max-steps", "4")
    assert result.exit_code == 0, result.output
    assert not any(path.exists() for path in dead)
    assert alive.exists()


def test_a_resumed_runs_warning_points_at_its_caller(texts, tiny_config, trained, tmp_path):

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    with pytest.warns(UserWarning, match=r"ignored: .*lr=0\.5") as caught:  # (train: the copy's text, not these)
        Trainer(tiny_config(texts / "train.txt", lr=0.5), model, resume=True, progress=False)
    assert caught[0].filename == __file__


_HOLDS_THE_FOLDER = """
import sys
from spacy_elmo.train import TrainConfig, Trainer
trainer = Trainer(TrainConfig(train=[]), sys.argv[1], resume=True, progress=False)  # a live run: it holds the folder
print("holding", flush=True)
sys.stdin.read()  # until killed
"""


def test_a_second_run_into_a_folder_in_use_is_refused_until_its_run_dies(texts, tiny_config, trained, tmp_path):
    """`train out ... & train out --seed 2`: both said "saved to out" and the folder held one run's model."""
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    copy_run(trained, texts, out)
    for name in ("train.spacy", "dev.spacy"):  # adapt's inputs exist: a missing one is refused first, by name
        (tmp_path / name).touch()
    live = subprocess.Popen(
        [sys.executable, "-c", _HOLDS_THE_FOLDER, str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert live.stdout.readline().strip() == "holding"
        before = _files(out)
        message = f"error: {out} is in use by another spacy-elmo run (it holds .lock there): wait for it to end"
        for args in (
            ["train", str(out), "--train", str(texts / "train.txt"), "--arch", "tiny", "--seed", "2", "--overwrite"],
            ["train", str(out), "--resume"],
            ["adapt", str(out), "--train", str(tmp_path / "train.spacy"), "--dev", str(tmp_path / "dev.spacy")],
            ["evaluate", str(out), str(texts / "valid.txt"), "--record", "valid"],
            ["prepare-corpus", str(out), "--source", str(texts / "train.txt")],
        ):
            result = CliRunner().invoke(app, [*args, "--no-progress"] if args[0] == "train" else args)
            assert result.exit_code == 2, result.output
            assert result.output.startswith(message), result.output
            assert len(result.output.strip().splitlines()) == 1
        with pytest.raises(ValueError, match="is in use by another spacy-elmo run"):
            train(tiny_config(texts / "train.txt", max_steps=1), out, progress=False, overwrite=True)
        assert _files(out) == before
    finally:
        live.send_signal(signal.SIGKILL)
        live.wait()
    # the killed run's lock is the kernel's to release: the next run goes ahead (its empty lock file stays)
    result = cli_train(out, "--resume", "--max-steps", "4")
    assert result.exit_code == 0, result.output
    assert load_checkpoint(out / "checkpoint.safetensors").info["state"]["step"] == 4


def test_evaluate_record_refuses_a_bad_metrics_file_before_evaluating(texts, trained, tmp_path):
    """A string wall_time_s: metrics.json got the record, then a 70-line TypeError left the card behind it."""

    model = tmp_path / "model"
    copy_run(trained, texts, model)
    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    (model / "metrics.json").write_text(json.dumps({**metrics, "wall_time_s": "12"}), encoding="utf-8")
    (model / "README.md").write_text("# the card\n", encoding="utf-8")
    before = _files(model)
    args = ["evaluate", str(model), str(texts / "valid.txt"), "--record", "valid"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output == (
        f'error: {model / "metrics.json"}: wall_time_s: input should be a valid number, not "12": correct it, then '
        "record again (nothing was changed)\n"
    )
    assert _files(model) == before
    (model / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    result = CliRunner().invoke(app, [*args[:-1], "valid | wiki"])
    assert result.exit_code == 0, result.output
    recorded = json.loads((model / "metrics.json").read_text(encoding="utf-8"))["test"]["valid | wiki"]
    assert f"| valid \\| wiki | {recorded['forward']:.1f} / {recorded['backward']:.1f} |" in (
        model / "README.md"
    ).read_text(encoding="utf-8")


_KILLED_WHILE_WRITING = """
import sys, time
from pathlib import Path
from spacy_elmo.cli import app
from spacy_elmo.train.output_folder import storage

real_save_file = storage.save_file

def stalls(tensors, filename, metadata=None):  # a checkpoint write that is under way when the process is killed
    if metadata["format"] != "spacy-elmo checkpoint":
        return real_save_file(tensors, filename, metadata=metadata)
    Path(filename).write_bytes(b"part of a checkpoint")
    print("writing", flush=True)
    time.sleep(300)

storage.save_file = stalls
app(["train", sys.argv[1], "--resume", "--max-steps", "4", "--no-progress", "--threads", "1"])
"""


def test_a_run_killed_while_writing_a_checkpoint_leaves_nothing_after_resume(texts, trained, tmp_path):
    """Each kill during a checkpoint write left a checkpoint-sized hidden temporary (two after two kills), which no
    --resume removed."""
    import itertools
    import signal
    import subprocess
    import sys

    out = tmp_path / "out"
    copy_run(trained, texts, out)
    before = (out / "checkpoint.safetensors").read_bytes()
    for _ in range(2):
        run = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WHILE_WRITING, str(out)], stdout=subprocess.PIPE, text=True
        )
        try:
            said = [line.strip() for line in itertools.takewhile(lambda line: line.strip() != "writing", run.stdout)]
            assert run.poll() is None, said  # stopped in the checkpoint write, not ended
        finally:
            run.send_signal(signal.SIGKILL)
            run.wait()
        left = [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # the second run removed the first's
        assert len(left) == 1 and left[0].startswith(f".checkpoint.safetensors.{run.pid}."), left
    assert (out / "checkpoint.safetensors").read_bytes() == before
    result = cli_train(out, "--resume", "--max-steps", "4")
    assert result.exit_code == 0, result.output
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert load_checkpoint(out / "checkpoint.safetensors").info["state"]["step"] == 4
