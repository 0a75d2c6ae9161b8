"""Training in stages: metrics.json's stages and total words seen carry over --init-from; the model card lists them."""

import json
import shutil
from pathlib import Path

import pytest

from spacy_elmo.train import train
from spacy_elmo.train.corpus.prepare import SourceSpec, prepare_corpus, read_source_info
from spacy_elmo.train.output_folder.stages import earlier_stages
from tests.conftest import torch_threads

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "corpus_layouts"


@pytest.fixture(scope="module")
def tiny_options():
    """Three steps of small batches from TrainConfig's seed (0: the one the recorded corpus reading names)."""
    return dict(token_budget=256, warmup_steps=1, max_steps=3, checkpoint_every=0, seed=0)


@pytest.fixture(scope="module")
def two_stages(tmp_path_factory, tiny_config):
    """Stage 1 on the Gutenberg sample, stage 2 continuing it (--init-from) on the Simple Wikipedia sample."""
    root = tmp_path_factory.mktemp("stages")
    for layout in ("gutenberg", "jsonl"):
        spec = SourceSpec(SAMPLES / layout, layout, info=read_source_info(None, SAMPLES / layout))
        prepare_corpus(root / layout, [spec], shard_sentences=8, progress=False)
    valid = root / "valid.txt"
    valid.write_text("April is a month .\nThe girls met once a week .\n", encoding="utf-8")
    with torch_threads(1):
        first = train(tiny_config(corpus=root / "gutenberg"), root / "stage1", progress=False)
        second = train(
            tiny_config(corpus=root / "jsonl", init_from=str(root / "stage1"), valid=[{"path": str(valid)}]),
            root / "stage2",
            progress=False,
        )
    return root, first, second


@pytest.mark.slow
def test_metrics_record_every_stage_and_the_words_seen_by_all(two_stages):
    root, first, second = two_stages
    stages = json.loads((root / "stage2" / "metrics.json").read_text())["stages"]
    assert [s["words_seen"] for s in stages] == [first["words_seen"], second["words_seen"]]
    assert all(s["words_seen"] > 0 for s in stages)
    assert second["total_words_seen"] == first["words_seen"] + second["words_seen"]
    assert stages[0]["started_from"] is None and stages[1]["started_from"] == "stage1"
    (gutenberg,) = stages[0]["sources"]
    assert gutenberg["info"]["repository"] == "github:rcdm-uga/Gutenberg_Text" and gutenberg["layout"] == "gutenberg"
    assert gutenberg["words"] == json.loads((root / "gutenberg" / "corpus.json").read_text())["words"]
    assert stages[1]["sources"][0]["info"]["commit"] == "d21d03334ce88c194f8b55317bf8091e7b836f83"
    assert stages[0]["valid_perplexity"] is None and stages[1]["valid_perplexity"]["mean"] > 1
    assert stages[1]["valid_perplexity"]["forward"] == second["best"]["valid_ppl_forward"]
    assert all(s["wall_time_s"] > 0 and s["steps"] == 3 for s in stages)


@pytest.mark.slow
def test_the_model_card_lists_every_stage(two_stages):
    root, first, second = two_stages
    card = (root / "stage2" / "README.md").read_text()
    section = card.split("## Training stages", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert len(rows) == 2
    assert "github:rcdm-uga/Gutenberg_Text@a0b16d35a985" in rows[0] and "public domain" in rows[0]
    assert "github:taminemelissa/quiz-generator" in rows[1] and "CC BY-SA 3.0" in rows[1]
    assert f"| {first['words_seen']:,} |" in rows[0] and f"| {second['words_seen']:,} |" in rows[1]
    assert f"Words seen over all stages: **{first['words_seen'] + second['words_seen']:,}**" in section


def test_stages_of_a_model_trained_before_stages_were_recorded(tmp_path):
    """A metrics.json without "stages" (the bundled v1 model's kind): one stage per run of its init_from chain."""
    metrics = {
        "command": "spacy-elmo train OUT/b --init-from OUT/a --train c.txt",
        "corpus": {"train": [{"path": "c.txt", "format": "lines", "tokenizer": "whitespace"}]},
        "words_seen": 300,
        "steps": 3,
        "wall_time_s": 60.0,
        "best": {"valid_ppl_forward": 20.0, "valid_ppl_backward": 22.0, "valid_ppl_mean": 21.0},
        "init_from": {
            "model": "OUT/a",
            "command": "spacy-elmo train OUT/a --train a.txt",
            "words_seen": 100,
            "steps": 1,
            "wall_time_s": 30.0,
            "best": {},
            "init_from": None,
        },
    }
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    old = earlier_stages(tmp_path)
    assert [s["words_seen"] for s in old] == [100, 300]
    assert old[0]["command"].endswith("--train a.txt") and old[0]["valid_perplexity"] is None
    assert old[1]["sources"][0]["path"] == "c.txt" and old[1]["valid_perplexity"]["mean"] == 21.0
    metrics["stages"] = [{"words_seen": 7}]  # recorded stages win
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    assert earlier_stages(tmp_path) == [{"words_seen": 7}]
    (tmp_path / "metrics.json").unlink()
    assert earlier_stages(tmp_path) == []  # a released model: no stages of ours


def test_the_bundled_model_carries_its_training_into_the_next_stage(tmp_path):
    from spacy_elmo.sources.model_paths import resolve_model_files

    directory = resolve_model_files("default")[0].parent
    shutil.copy(directory / "metrics.json", tmp_path / "metrics.json")
    stages = earlier_stages(tmp_path)
    recorded = json.loads((directory / "metrics.json").read_text())
    assert stages[-1]["words_seen"] == recorded["words_seen"]
    runs, link = 1, recorded.get("init_from")
    while link and link.get("command"):
        runs, link = runs + 1, link.get("init_from")
    assert len(stages) == (len(recorded["stages"]) if "stages" in recorded else runs)
    assert all(s["words_seen"] > 0 for s in stages)


def _batches_seen(monkeypatch) -> list[list[list[str]]]:
    """Every global batch the trainers of this test train on, in order."""
    from spacy_elmo.train.run.trainer import Trainer

    seen: list[list[list[str]]] = []
    original = Trainer.train_step

    def recording(self, batch, sentences, weight=1.0):
        seen.append([list(s) for s in sentences])
        return original(self, batch, sentences, weight)

    monkeypatch.setattr(Trainer, "train_step", recording)
    return seen


@pytest.fixture(scope="module")
def gutenberg_corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("continued")
    spec = SourceSpec(SAMPLES / "gutenberg", "gutenberg", info=read_source_info(None, SAMPLES / "gutenberg"))
    prepare_corpus(root / "corpus", [spec], shard_sentences=8, progress=False)
    return root


@pytest.mark.slow
def test_continue_corpus_reads_on_where_the_last_stage_stopped(gutenberg_corpus, tiny_config, tmp_path, monkeypatch):
    """Two stages of 3 steps with --continue-corpus train on the batches one run of 6 steps trains on, in order."""
    corpus = gutenberg_corpus / "corpus"
    seen = _batches_seen(monkeypatch)
    with torch_threads(1):
        train(tiny_config(corpus=corpus, token_budget=64, max_steps=6), tmp_path / "whole", progress=False)
        whole, seen[:] = list(seen), []
        train(tiny_config(corpus=corpus, token_budget=64), tmp_path / "one", progress=False)
        second = tiny_config(corpus=corpus, token_budget=64, init_from=str(tmp_path / "one"), continue_corpus=True)
        metrics = train(second, tmp_path / "two", progress=False)
    assert len(whole) == 6 and seen == whole  # stage 2 starts at the batch after stage 1's last
    first_reading = metrics["stages"][0]["corpus_reading"]
    assert first_reading["position"]["batch"] + first_reading["position"]["group"] > 0
    assert first_reading["seed"] == 0 and first_reading["token_budget"] == 64
    assert metrics["total_words_seen"] == sum(len(s) for batch in whole for s in batch)
    # without --continue-corpus the second stage starts the corpus again
    seen[:] = []
    with torch_threads(1):
        again = tiny_config(corpus=corpus, token_budget=64, init_from=str(tmp_path / "one"))
        train(again, tmp_path / "three", progress=False)
    assert seen == whole[:3]


@pytest.mark.slow
def test_continue_corpus_refuses_another_order_or_corpus_by_name(gutenberg_corpus, tiny_config, tmp_path):
    corpus = gutenberg_corpus / "corpus"
    with torch_threads(1):
        train(tiny_config(corpus=corpus, token_budget=64, max_steps=2), tmp_path / "one", progress=False)
        with pytest.raises(ValueError, match="seed 0 there, 1 here"):
            train(
                tiny_config(
                    corpus=corpus, token_budget=64, seed=1, init_from=str(tmp_path / "one"), continue_corpus=True
                ),
                tmp_path / "other-seed",
                progress=False,
            )
        other = gutenberg_corpus / "other"
        spec = SourceSpec(SAMPLES / "jsonl", "jsonl", info=read_source_info(None, SAMPLES / "jsonl"))
        prepare_corpus(other, [spec], shard_sentences=8, progress=False)
        with pytest.raises(ValueError, match="another prepared corpus"):
            train(
                tiny_config(corpus=other, token_budget=64, init_from=str(tmp_path / "one"), continue_corpus=True),
                tmp_path / "other-corpus",
                progress=False,
            )
    with pytest.raises(ValueError, match="--continue-corpus continues an --init-from model"):
        train(tiny_config(corpus=corpus, continue_corpus=True), tmp_path / "alone", progress=False)


def test_continue_corpus_needs_a_recorded_position():
    from spacy_elmo.train.output_folder.stages import continued_reading

    with pytest.raises(ValueError, match="records no position"):
        continued_reading([{"words_seen": 10}], {"seed": 0}, "abc")
    with pytest.raises(ValueError, match="records no position"):
        continued_reading([], {"seed": 0}, "abc")
