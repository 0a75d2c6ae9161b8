"""Damaged files through the commands: a model whose metrics.json is damaged is still described (`spacy-elmo info`
says in one line which field is damaged), and a softmax whose settings are out of bounds stops `evaluate` and
`train --init-from` with one line naming the file and the setting (exit 2), never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.runtime.embedding.backend import DEFAULT_MODEL_DIR

FAST = ("--no-progress", "--threads", "1", "--max-steps", "1")
MODEL_FILES = ("options.json", "weights.hdf5", "vocab.txt", "softmax.safetensors", "metrics.json")


@pytest.fixture(scope="module")
def model_copy(tmp_path_factory) -> Path:
    """A copy of the bundled model's folder, whose files a test may damage (each test restores what it damages)."""
    folder = tmp_path_factory.mktemp("damaged") / "model"
    folder.mkdir()
    for name in MODEL_FILES:
        shutil.copyfile(DEFAULT_MODEL_DIR / name, folder / name)
    return folder


def _metrics(**changes) -> str:
    metrics = json.loads((DEFAULT_MODEL_DIR / "metrics.json").read_text(encoding="utf-8"))
    return json.dumps({**metrics, **changes})


def _without_stages(**changes) -> str:
    metrics = json.loads((DEFAULT_MODEL_DIR / "metrics.json").read_text(encoding="utf-8"))
    del metrics["stages"]  # training_totals then reads the top-level wall_time_s
    return json.dumps({**metrics, **changes})


@pytest.mark.parametrize(
    "text, field",
    [
        ("[1, 2]", "the file holds a list, where a JSON object belongs"),
        (_metrics(stages=[1, 2]), "stages[0]: input should be a JSON object, not 1"),
        (_metrics(test=3), "test: input should be a JSON object, not 3"),
        (_without_stages(wall_time_s=None), "wall_time_s: input should be a valid number, not null"),
        (_metrics(vocab_size="many"), 'vocab_size: input should be a valid integer, not "many"'),
        (_metrics(best={"valid_ppl_forward": 1.0, "epoch": float("nan")}), "best.epoch: input should be a finite"),
        ('{"vocab_size": 3,', "not valid JSON"),
    ],
)
def test_info_describes_a_model_whose_metrics_are_damaged_and_names_the_field(model_copy, text, field):
    path = model_copy / "metrics.json"
    path.write_text(text, encoding="utf-8")
    try:
        result = CliRunner().invoke(app, ["info", str(model_copy)])
    finally:
        shutil.copyfile(DEFAULT_MODEL_DIR / "metrics.json", path)
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "architecture: char CNN" in result.output, result.output
    damaged = [line for line in result.output.splitlines() if "metrics.json" in line]
    assert len(damaged) == 1, result.output
    assert damaged[0].startswith(f"training:     not shown, {path}: {field}"), damaged[0]
    assert "correct it, or delete it" in damaged[0]


def _damage_softmax(folder: Path, **changes) -> None:
    from safetensors import safe_open

    from spacy_elmo.train.output_folder.storage import SOFTMAX_KIND, write_tensor_file

    with safe_open(str(DEFAULT_MODEL_DIR / "softmax.safetensors"), "pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (safe_open is not iterable)
        info = json.loads(handle.metadata()["json"])
    write_tensor_file(folder / "softmax.safetensors", tensors, SOFTMAX_KIND, {**info, **changes})


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    return errors[0]


@pytest.mark.parametrize("div_value", [0, -4, 1e-30])
def test_evaluate_and_fine_tuning_refuse_a_softmax_whose_div_value_is_out_of_bounds(model_copy, tmp_path, div_value):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat .\n", encoding="utf-8")
    _damage_softmax(model_copy, div_value=div_value)
    try:
        evaluated = CliRunner().invoke(app, ["evaluate", str(model_copy), str(text)])
        tuned = CliRunner().invoke(
            app,
            ["train", str(tmp_path / "tuned"), "--init-from", str(model_copy), "--train", str(text), *FAST],
        )
    finally:
        shutil.copyfile(DEFAULT_MODEL_DIR / "softmax.safetensors", model_copy / "softmax.safetensors")
    for result in (evaluated, tuned):
        assert result.exit_code == 2, result.output
        line = _one_error_line(result.output)
        assert f"{model_copy / 'softmax.safetensors'}: div_value: " in line, line
        assert "train the model again" in line, line


def test_fine_tuning_refuses_a_model_whose_metrics_are_damaged_naming_the_field(model_copy, tmp_path):
    """The training history of --init-from's model goes into the new model's metrics.json: a damaged one is refused
    (one line naming the field, and that deleting it fine-tunes without that history), not copied along."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat .\n", encoding="utf-8")
    path = model_copy / "metrics.json"
    path.write_text(_metrics(stages=[{"wall_time_s": "long"}]), encoding="utf-8")
    try:
        result = CliRunner().invoke(
            app, ["train", str(tmp_path / "tuned"), "--init-from", str(model_copy), "--train", str(text), *FAST]
        )
    finally:
        shutil.copyfile(DEFAULT_MODEL_DIR / "metrics.json", path)
    assert result.exit_code == 2, result.output
    line = _one_error_line(result.output)
    assert f'{path}: stages[0].wall_time_s: input should be a valid number, not "long"' in line, line
    assert "delete it to fine-tune the model without its training history" in line, line
