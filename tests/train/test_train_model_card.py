"""The model card of a trained biLM: every section, from a hand-written options.json and metrics.json.

The numbers below are the inputs' own, formatted as the card promises (one decimal for perplexities,
thousands separators for counts, minutes or seconds for wall times); each expectation is written out
from the inputs, not from a previous rendering."""

import itertools
import json
import shutil
from pathlib import Path

import pytest

from spacy_elmo.bilm.weights import parameter_count, read_options
from spacy_elmo.train.output_folder.model_card import render_model_card

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "allennlp_elmo"

METRICS = {
    "command": "/venv/bin/spacy-elmo train OUT/c --init-from OUT/b --corpus DATA/prepared",
    "config": {
        "seed": 7,
        "lr": 0.001,
        "lr_schedule": "cosine",
        "min_lr_ratio": 0.1,
        "warmup_steps": 20,
        "clip_norm": 1.0,
        "dropout": 0.1,
        "token_budget": 4096,
        "threads": 2,
        "min_count": 3,
        "vocab_size": 5000,
        "cutoffs": [100, 1000],
        "div_value": 4.0,
        "max_length": 50,
    },
    "parameters": {"softmax": 123456},
    "vocab_size": 4321,
    "corpus": {
        "train": [{"path": "/x/shared/data/wiki/train.txt", "format": "lines", "tokenizer": "whitespace"}],
        "valid": [{"path": "/x/shared/data/wiki/valid.txt"}, {"path": "/elsewhere/dev.txt"}],
        "prepared": ["DATA/prepared"],
        "words": 20000,
        "distinct_words": 3000,
    },
    "steps": 1500,
    "words_seen": 50000,
    "wall_time_s": 600.0,
    "train_seconds": 480.0,
    "best": {"step": 1200, "valid_ppl_forward": 55.55, "valid_ppl_backward": 66.64},
    "test": {"wiki/test.txt": {"forward": 77.77, "backward": 88.81}},
    "evaluations": [
        {"step": 1000, "epoch": 0.5, "valid_ppl_forward": 60.0, "valid_ppl_backward": 61.0, "tokens_per_s": 900},
        {"step": 10, "epoch": 0.004, "train_ppl_forward": 1000.04, "train_ppl_backward": 999.96},
    ],
    "epochs": [
        {
            "step": 400,
            "epoch": 1,
            "train_ppl_forward": 90.0,
            "train_ppl_backward": 91.0,
            "valid_ppl_forward": 95.0,
            "valid_ppl_backward": 96.0,
        }
    ],
    "init_from": {
        "model": "OUT/b",
        "command": "/x/spacy_elmo/__main__.py train OUT/b --init-from OUT/a",
        "steps": 5,
        "words_seen": 1000,
        "wall_time_s": 90.0,
        "best": {"valid_ppl_forward": 20.0, "valid_ppl_backward": 22.0},
        "init_from": {"model": "OUT/a", "init_from": None},
    },
    "stages": [
        {"command": "spacy-elmo train OUT/a --train a.txt", "words_seen": 100, "wall_time_s": 30.0},
        {
            "sources": [
                {
                    "path": "/d/novels",
                    "layout": "gutenberg",
                    "tokenizer": "spacy",
                    "words": 1234,
                    "info": {"repository": "github:o/r", "commit": "0123456789abcdef", "licence": "public domain"},
                }
            ],
            "words_seen": 1000,
            "wall_time_s": 150.0,
            "valid_perplexity": {"forward": 20.0, "backward": 22.0},
        },
        {"sources": [{"path": "/d/wiki", "layout": "jsonl", "tokenizer": "whitespace"}], "words_seen": 50000},
    ],
    "total_words_seen": 51100,
}


@pytest.fixture
def model(tmp_path):
    shutil.copy(FIXTURE / "options.json", tmp_path / "options.json")
    shutil.copy(FIXTURE / "lm_weights.hdf5", tmp_path / "weights.hdf5")
    (tmp_path / "metrics.json").write_text(json.dumps(METRICS), encoding="utf-8")
    return tmp_path


def section(card: str, title: str) -> str:
    return card.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_card_has_every_section_in_order(model):
    card = render_model_card(model, title="My biLM", notes="  Trained for a test.  \n")
    assert card.startswith("# My biLM\n\nAn ELMo bidirectional language model")
    titles = [line[3:] for line in card.splitlines() if line.startswith("## ")]
    assert titles == [
        "Architecture",
        "Training data",
        "How it was trained",
        "Training stages",
        "Perplexity",
        "Notes",
        "Continue training",
    ]
    assert section(card, "Notes") == "\nTrained for a test.\n"
    assert card.endswith("--valid VALID.txt --epochs 1\n```\n")
    assert "## Notes" not in render_model_card(model)


def test_architecture_and_vocabulary(model):
    options = json.loads((model / "options.json").read_text())
    lstm, cnn = options["lstm"], options["char_cnn"]
    size = (model / "options.json").stat().st_size + (model / "weights.hdf5").stat().st_size
    lines = section(render_model_card(model), "Architecture").strip().splitlines()
    assert lines[0] == (
        f"- character CNN: char embedding {cnn['embedding']['dim']}, filters {cnn['filters']}, "
        f"{cnn['n_highway']} highway layer(s), projection to {lstm['projection_dim']}"
    )
    assert lines[1].startswith(f"- biLSTM: {lstm['n_layers']} layers per direction, {lstm['dim']} cells projected")
    assert lines[1].endswith(f"clipping {lstm['cell_clip']}")
    assert lines[2] == f"- ELMo output: {lstm['n_layers'] + 1} layers x {2 * lstm['projection_dim']} dimensions"
    assert lines[3].startswith(f"- parameters: {parameter_count(read_options(model / 'options.json')):,} in the biLM")
    assert f"{size / 1e6:.1f} MB), plus 123,456 in the adaptive softmax" in lines[3]
    assert lines[4].startswith("- output vocabulary (`vocab.txt`): 4,321 words")
    assert "at least 3 times (at most 5000)" in lines[4] and "cutoffs [100, 1000], div_value 4.0" in lines[4]


def test_training_data_lists_files_and_prepared_sources(model):
    text = section(render_model_card(model), "Training data")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows == [
        "| file | format | tokenizer |",
        "| `data/wiki/train.txt` | lines | whitespace |",
        "| `wiki`, jsonl | jsonl | whitespace |",  # a prepared corpus: the last stage's sources
    ]
    assert "20,000 words (3,000 distinct)" in text and "cut at 50 tokens" in text
    assert text.strip().endswith("Validation: `data/wiki/valid.txt`, `dev.txt`.")


def test_how_it_was_trained_follows_the_init_from_chain(model):
    text = section(render_model_card(model), "How it was trained")
    assert "```bash\nspacy-elmo train OUT/c --init-from OUT/b --corpus DATA/prepared\n```" in text
    assert "- seed 7, Adam lr 0.001 (cosine decay to 0.1 x lr, 20 warm-up steps), gradient clipping 1.0" in text
    assert "dropout 0.1, 4096 padded tokens per batch" in text
    assert "- 1,500 steps, 50,000 words seen (2.50 epochs), wall time 10 min (of which 8 min in training" in text
    assert "2 CPU thread(s)" in text and "(step 1200)" in text
    chain = text.split("(step 1200)\n", 1)[1]
    assert chain == (
        "\nInitialised from `OUT/b`, trained with:\n\n"
        "```bash\npython -m spacy_elmo train OUT/b --init-from OUT/a\n```\n\n"
        "- 5 steps, 1,000 words seen, wall time 2 min, validation perplexity 20.0 / 22.0\n"
        "\nInitialised from `OUT/a`.\n\n"
    )


def test_stages_and_perplexity_tables(model):
    card = render_model_card(model)
    stages = [line for line in section(card, "Training stages").splitlines() if line[:3] in ("| 1", "| 2", "| 3")]
    assert stages == [
        "| 1 | `spacy-elmo train OUT/a --train a.txt` | 100 | 30 s |  |",
        "| 2 | `novels` (github:o/r@0123456789ab), gutenberg, public domain, 1,234 words | 1,000 | 2 min "
        "| 20.0 / 22.0 |",
        "| 3 | `wiki`, jsonl | 50,000 |  |  |",
    ]
    assert "Words seen over all stages: **51,100**." in card
    rows = [line for line in section(card, "Perplexity").splitlines() if line.startswith("| ")]
    assert rows == [
        "| data | forward / backward |",
        "| validation (data/wiki/valid.txt, dev.txt) | 55.5 / 66.6 |",
        "| wiki/test.txt | 77.8 / 88.8 |",
        "| step | epoch | train fwd / bwd | valid fwd / bwd | tokens/s |",
        "| 400 | 1.00 | 90.0 / 91.0 | 95.0 / 96.0 |  |",  # sorted by step; evaluations without validation left out
        "| 1000 | 0.50 |  | 60.0 / 61.0 | 900 |",
    ]


def test_a_card_with_the_least_metrics(model):
    (model / "metrics.json").write_text(json.dumps({"config": {}, "best": None}), encoding="utf-8")
    card = render_model_card(model)
    assert "## Training stages" not in card and "Validation during training" not in card
    assert "\n```bash\n\n```\n" in card  # no recorded command
    assert section(card, "Perplexity").strip().endswith("|---|---|")
    assert "- 0 steps, 0 words seen (0.00 epochs), wall time 0 min" in card and "default CPU thread(s)" in card


def test_an_export_made_during_a_run_reports_its_stage(model):
    """An --eval-every export has no end-of-run figures: the card takes them from the run's stage record."""
    metrics = {k: v for k, v in METRICS.items() if k not in ("steps", "words_seen", "wall_time_s", "train_seconds")}
    metrics["stages"] = [
        *METRICS["stages"][:2],
        {"words_seen": 3661810, "steps": 1000, "wall_time_s": 2832.1, "train_seconds": 2765.1},
    ]
    metrics["corpus"] = {**METRICS["corpus"], "words": 156166582}
    (model / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    text = section(render_model_card(model), "How it was trained")
    assert "- 1,000 steps, 3,661,810 words seen (0.02 epochs), wall time 47 min (of which 46 min in training" in text


def test_recording_a_result_keeps_the_cards_title_and_notes(model):
    """``spacy-elmo evaluate --record`` rewrites the card from metrics.json: the new result appears, and the title and
    the notes someone wrote into the card (subsections and tables included) stay as they were."""
    from spacy_elmo.train.output_folder.model_card import write_model_card
    from spacy_elmo.train.run.evaluation import record_result

    notes = "Stage dates below.\n\n### Evidence\n\n| check | value |\n|---|---|\n| TREC-6 | 0.906 |"
    write_model_card(model, title="Our biLM v2", notes=notes)
    record_result(model, "news/test.txt", {"forward": 123.44, "backward": 130.06, "mean": 126.7})
    card = (model / "README.md").read_text(encoding="utf-8")
    assert card.startswith("# Our biLM v2\n")
    assert card.split("\n## Notes\n\n", 1)[1].split("\n\n## Continue training\n")[0] == notes
    assert "| news/test.txt | 123.4 / 130.1 |" in section(card, "Perplexity")
    # a card without notes gets none
    write_model_card(model)
    record_result(model, "news/test.txt", {"forward": 1.0, "backward": 2.0, "mean": 1.5})
    card = (model / "README.md").read_text(encoding="utf-8")
    assert card.startswith("# spacy-elmo biLM\n") and "## Notes" not in card


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row, split at the pipes that are not escaped."""
    import re

    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]


def test_names_and_paths_with_pipes_or_line_breaks_keep_the_tables_whole(model):
    """A record named "a|b" split its row into three cells: the card's table broke."""
    from spacy_elmo.train.output_folder.model_card import write_model_card
    from spacy_elmo.train.run.evaluation import record_result

    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    metrics["corpus"]["train"][0]["path"] = "/x/data/a|b.txt"
    metrics["stages"][1]["sources"][0]["info"]["licence"] = "CC|BY\nSA"
    (model / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    write_model_card(model)
    record_result(model, "dev|test set", {"forward": 12.34, "backward": 5.67, "mean": 8.0})
    card = (model / "README.md").read_text(encoding="utf-8")
    for title, width in (("Training data", 3), ("Perplexity", 2), ("Training stages", 5)):
        lines = section(card, title).splitlines()
        first = next(i for i, line in enumerate(lines) if line.startswith("|"))
        rows = list(itertools.takewhile(lambda line: line.startswith("|"), lines[first:]))
        assert len(rows) > 2 and all(len(_cells(row)) == width for row in rows), (title, rows)
    assert "| dev\\|test set | 12.3 / 5.7 |" in section(card, "Perplexity")
    assert "| `data/a\\|b.txt` | lines | whitespace |" in section(card, "Training data")
    assert "CC\\|BY SA" in section(card, "Training stages")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.update(wall_time_s="12"), r'metrics\.json: wall_time_s: input should be a valid number, not "12"'),
        (
            lambda m: m["stages"][1].update(words_seen=[1]),
            r"stages\[1\]\.words_seen: input should be a valid integer, not \[1\]",
        ),
        (
            lambda m: m["test"]["wiki/test.txt"].update(forward="77"),
            r'test\.wiki/test\.txt\.forward: input should be a valid number, not "77"',
        ),
        (lambda m: m.update(test=["x"]), r'metrics\.json: test: input should be a JSON object, not \["x"\]'),
    ],
)
def test_recording_checks_everything_before_a_file_changes(model, change, message):
    """A string wall_time_s: metrics.json got the result, then the card crashed with a TypeError (they disagreed)."""
    from spacy_elmo.train.output_folder.model_card import write_model_card
    from spacy_elmo.train.run.evaluation import record_result

    write_model_card(model)
    metrics = json.loads((model / "metrics.json").read_text(encoding="utf-8"))
    change(metrics)
    (model / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(ValueError, match=message):
        record_result(model, "news", {"forward": 1.0, "backward": 2.0, "mean": 1.5})
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


@pytest.mark.parametrize(
    ("name", "result", "message"),
    [
        ("two\nlines", {"forward": 1.0, "backward": 2.0}, "a record name is one line of printable text"),
        ("", {"forward": 1.0, "backward": 2.0}, "a record name is one line of printable text"),
        ("news", {"forward": "1.0", "backward": 2.0}, "has no number 'forward'"),
        ("news", {"backward": 2.0}, "has no number 'forward'"),
    ],
)
def test_a_bad_record_name_or_result_changes_nothing(model, name, result, message):
    from spacy_elmo.train.output_folder.model_card import write_model_card
    from spacy_elmo.train.run.evaluation import record_result

    write_model_card(model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(ValueError, match=message):
        record_result(model, name, result)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
