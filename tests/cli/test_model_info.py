"""``spacy-elmo info``'s training lines: the time and words of every stage a model's ``metrics.json`` records."""

import json
import shutil

from typer.testing import CliRunner

from spacy_elmo.cli import app


def _stage(command: str, wall_time_s, words_seen: int) -> dict:
    return {"command": command, "wall_time_s": wall_time_s, "words_seen": words_seen}


def _info_train_line(fixture_dir, tmp_path, metrics: dict) -> str:
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(fixture_dir / "options.json", model / "options.json")
    shutil.copy(fixture_dir / "lm_weights.hdf5", model / "weights.hdf5")
    (model / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    shown = CliRunner().invoke(app, ["info", str(model)])
    assert shown.exit_code == 0, shown.output
    return next(line for line in shown.output.splitlines() if line.startswith("train time:"))


def test_train_time_is_the_sum_of_every_recorded_stage(fixture_dir, tmp_path):
    """A model trained in three stages: the first stage's wall time is in ``stages`` only (its ``init_from`` link, as
    the bundled default's is, lacks it), so following ``init_from`` counted 60 of the 96 minutes."""
    first, second, third = (
        _stage("train stage-1", 2160.0, 1_000_000),
        _stage("train stage-2 --init-from stage-1", 1440.0, 2_000_000),
        _stage("train stage-3 --init-from stage-2", 2160.0, 3_000_000),
    )
    metrics = {
        **third,
        "init_from": {**second, "init_from": {**first, "wall_time_s": None}},
        "stages": [first, second, third],
        "total_words_seen": 6_000_000,
    }
    line = _info_train_line(fixture_dir, tmp_path, metrics)
    assert line == "train time:   96.0 min wall (1.6 h), 6,000,000 words seen (3 runs)"


def test_train_time_without_stages_follows_the_init_from_chain(fixture_dir, tmp_path):
    """A model trained before stages were recorded: its own run and the runs its ``init_from`` chain names."""
    metrics = {**_stage("train b --init-from a", 1800.0, 2_000_000), "init_from": _stage("train a", 600.0, 500_000)}
    line = _info_train_line(fixture_dir, tmp_path, metrics)
    assert line == "train time:   40.0 min wall (0.7 h), 2,500,000 words seen (2 runs)"
