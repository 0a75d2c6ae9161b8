"""Write the Markdown results table from metrics/*.json: scores, learned mixes, wall times and exact commands."""

from __future__ import annotations

import json
import os
import platform
import statistics
from datetime import date
from pathlib import Path
from typing import Any

import spacy
import torch
import typer
from weasel.util import load_project_config

import spacy_elmo
from spacy_elmo import load_bilm

TEXTCAT = ("accuracy", "cats_macro_f")
NER = ("ents_p", "ents_r", "ents_f")


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else platform's answer."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def model_line(model: str) -> str:
    """Which ELMo model the runs used, with its shape."""
    backend = load_bilm(model)
    name = "the small bundled biLM" if model == "default" else f"`{model}`"
    return f"{name} ({backend.n_layers + 1} layers of width {backend.dim})"


def mix_cells(run: dict[str, Any]) -> list[str]:
    """Layer weights and gamma of the run's (one) learned mix, or dashes for a pipeline without ELMo."""
    if not run["mix"]:
        return ["–", "–"]
    (mix,) = run["mix"].values()
    return [" / ".join(f"{w:.3f}" for w in mix["weights"]), f"{mix['gamma']:.3f}"]


def table(metrics: list[dict[str, Any]], keys: tuple) -> list[str]:
    """One row per run plus a mean row per variant."""
    names = {"accuracy": "accuracy", "cats_macro_f": "macro-F", "ents_p": "P", "ents_r": "R", "ents_f": "F"}
    head = [
        "variant",
        "seed",
        *(names[k] for k in keys),
        "layer weights (0 / 1 / 2)",
        "gamma",
        "train s",
        "peak MiB",
        "test s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for variant in metrics:
        runs = variant["runs"]
        for run in runs:
            cells = [
                variant["name"],
                str(run["seed"]),
                *(f"{run[k]:.3f}" for k in keys),
                *mix_cells(run),
                f"{run['train_s']:.0f}",
                f"{run['peak_rss_mb']:.0f}" if "peak_rss_mb" in run else "–",
                f"{run['eval_s']:.0f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        means = [f"**{statistics.mean(r[k] for r in runs):.3f}**" for k in keys]
        train_s = statistics.mean(r["train_s"] for r in runs)
        lines.append(
            "| " + " | ".join([f"**{variant['name']}**", "mean", *means, "", "", f"{train_s:.0f}", "", ""]) + " |"
        )
    return lines


def adaptation_lines(directories: list[Path]) -> list[str]:
    """One row per domain-adapted model: what it trained on and the dev perplexity before and after."""
    rows = [json.loads((d / "adaptation.json").read_text(encoding="utf-8")) for d in directories]
    if not rows:
        return []
    lines = [
        "## Domain adaptation: dev perplexity of the biLM's LM",
        "",
        "`spacy-elmo adapt` fine-tuned the bundled biLM's language model on each task's training docs' text "
        "(labels unused); perplexity per predicted token on the task's dev text, mean of the two directions.",
        "",
        "| adapted model | training docs | steps | train s | dev perplexity before | after |",
        "|---|---|---|---|---|---|",
    ]
    for directory, row in zip(directories, rows):
        lines.append(
            f"| `{directory}` | {row['n_train_docs']:,} | {row['steps']} | {row['wall_time_s']:.0f} | "
            f"{row['dev_perplexity_before']['mean']:.1f} | {row['dev_perplexity_after']['mean']:.1f} |"
        )
    return [*lines, ""]


def main(
    names: list[str] = typer.Argument(..., help="metrics/NAME.json files, in table order"),
    var: list[str] = typer.Option([], help="NAME=VALUE: a project variable as the run used it (for the commands)"),
    output: Path = typer.Option(Path("results.md")),
    metrics_dir: Path = typer.Option(Path("metrics")),
    adapted: list[Path] = typer.Option([], help="Domain-adapted model directories (their adaptation.json)"),
    note: list[str] = typer.Option([], help="A paragraph to add after the setting (e.g. how the machine was shared)"),
) -> None:
    """Collect the runs into ``output``."""
    metrics = [json.loads((metrics_dir / f"{name}.json").read_text(encoding="utf-8")) for name in names]
    project = load_project_config(Path("."), overrides={f"vars.{k}": x for k, _, x in (o.partition("=") for o in var)})
    settings = metrics[0]["settings"]
    n_train = {m["name"].split("_")[0]: m["settings"]["n_train"] for m in metrics}
    textcat = [m for m in metrics if "accuracy" in m["runs"][0]]
    ner = [m for m in metrics if "ents_f" in m["runs"][0]]
    total = sum(r["train_s"] + r["eval_s"] for m in metrics for r in m["runs"])
    lines = [
        "# ELMo features in spaCy pipelines: results",
        "",
        f"Written by `python -m spacy project run all` in `examples/project` on {date.today().isoformat()}: "
        f"{cpu_name()}, {os.cpu_count()} cores (shared with other work), spaCy {spacy.__version__}, "
        f"spacy-elmo {spacy_elmo.__version__}, torch {torch.__version__}.",
        "",
        f"ELMo model: {model_line(settings['elmo'])}. "
        f"Training docs: {', '.join(f'{k} {n:,}' for k, n in n_train.items())}; "
        f"`--training.max_steps {settings['max_steps']}`, dev scored every {settings['eval_frequency']} steps; "
        f"each run's `model-best` (best dev score) is scored on the test set. Seeds {settings['seeds']}. "
        "Layer weights are softmax(s) of the learned mix (layer 0 = the context-free token layer), gamma its scale. "
        "Wall times in seconds, on a machine shared with other work (so only roughly comparable). ELMo embeddings "
        "go to the disk cache `cache/elmo`: `spacy debug data` (the `check` step) initializes each pipeline, which "
        "embeds the training docs; the first ELMo run of a task embeds its dev docs in `train s` and its test docs "
        "in `test s`; later runs read them from the cache. `peak MiB`: the training process's peak resident memory "
        "(the kernel's max RSS of `spacy train`). Variants: `tok2vec` spaCy's own (no ELMo); `elmo` the frozen biLM's "
        "learned mix (ElmoScalarMix.v2); `elmo_adapted` the same on the biLM adapted to the task's text "
        "(`spacy-elmo adapt`); `elmo_finetune` end-to-end fine-tuning of the top LSTM layer of each direction "
        "(ElmoFineTune.v1, trainable top), which runs the biLM for every batch; `*_tok2vec` the variant beside spaCy's "
        "hash embeddings.",
        "",
    ]
    lines += [*(x for n in note for x in (n, "")), *adaptation_lines(adapted)]
    if textcat:
        lines += [
            "## SST-5: test accuracy",
            "",
            "Accuracy is computed by `scripts/evaluate.py`; spaCy's `cats_score` is the macro-F (shown too).",
            "",
        ]
        lines += [*table(textcat, TEXTCAT), ""]
    if ner:
        lines += ["## WNUT-17: test entity precision, recall, F", ""]
        lines += [*table(ner, NER), ""]
    lines += [
        f"Train + test wall time of all runs: {total / 60:.1f} min.",
        "",
        "## Commands",
        "",
        "Run from `examples/project` (`python -m spacy project run all` runs all of them):",
        "",
        "```bash",
    ]
    for command in project["commands"]:
        if command["name"] in ("convert", "check") or command["name"].endswith("_adapt"):
            lines += command["script"]
    for m in metrics:
        for run in m["runs"]:
            lines += [run["command"], run["eval_command"]]
    lines += ["```", ""]
    output.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {output}")


if __name__ == "__main__":
    typer.run(main)
