"""Train one config with several seeds through ``python -m spacy train``, score each on test, write metrics JSON."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import spacy
import typer
from evaluate import evaluate
from spacy.tokens import DocBin


def train_command(
    config: Path,
    output: Path,
    train: Path,
    dev: Path,
    seed: int,
    max_steps: int,
    eval_frequency: int,
    gpu_id: int,
    elmo: str,
    elmo_cache: str,
) -> list[str]:
    """The ``spacy train`` command line of one run (as a user would type it)."""
    command = [
        "python",
        "-m",
        "spacy",
        "train",
        str(config),
        "--output",
        str(output),
        "--paths.train",
        str(train),
        "--paths.dev",
        str(dev),
        "--system.seed",
        str(seed),
        "--training.max_steps",
        str(max_steps),
        "--training.eval_frequency",
        str(eval_frequency),
    ]
    if gpu_id >= 0:
        command += ["--gpu-id", str(gpu_id)]
    if "elmo_cache" in spacy.util.load_config(config)["paths"]:  # an ELMo config
        command += ["--paths.elmo", elmo, "--paths.elmo_cache", elmo_cache]
        if gpu_id >= 0:
            command += ["--components.elmo.device", f"cuda:{gpu_id}"]
    return command


def train_process(command: list[str]) -> float:
    """Run one training process to its end; its peak resident memory in MiB (the kernel's max RSS of that process)."""
    process = subprocess.Popen(command)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
    return usage.ru_maxrss / 1024  # KiB on Linux


def main(
    config: Path,
    name: str,
    train: Path,
    dev: Path,
    test: Path,
    seeds: str = typer.Option("1,2", help="comma-separated seeds, one run each"),
    max_steps: int = typer.Option(1500),
    eval_frequency: int = typer.Option(250),
    gpu_id: int = typer.Option(-1),
    elmo: str = typer.Option("default", help="the ELMo model of the ELMo configs: a directory or 'default'"),
    elmo_cache: str = typer.Option("cache/elmo", help="the backend's disk cache, shared by the ELMo runs"),
    training_dir: Path = typer.Option(Path("training")),
    metrics_dir: Path = typer.Option(Path("metrics")),
) -> None:
    """Each seed: train (model-best is chosen on dev), then score model-best on ``test``; timings included."""
    runs = []
    for seed in (int(s) for s in seeds.split(",")):
        output = training_dir / f"{name}_s{seed}"
        command = train_command(config, output, train, dev, seed, max_steps, eval_frequency, gpu_id, elmo, elmo_cache)
        start = time.perf_counter()
        peak_mb = train_process([sys.executable, *command[1:]])
        train_s = time.perf_counter() - start
        start = time.perf_counter()
        scores = evaluate(output / "model-best", test)
        eval_s = time.perf_counter() - start
        eval_command = shlex.join(["python", "scripts/evaluate.py", str(output / "model-best"), str(test)])
        runs.append(
            {
                "seed": seed,
                "command": shlex.join(command),
                "eval_command": eval_command,
                "train_s": train_s,
                "peak_rss_mb": peak_mb,
                "eval_s": eval_s,
                **scores,
            }
        )
        print(json.dumps(runs[-1], indent=2))
    metrics_dir.mkdir(parents=True, exist_ok=True)
    n_train = len(DocBin().from_disk(train))
    settings = {
        "elmo": elmo,
        "n_train": n_train,
        "max_steps": max_steps,
        "eval_frequency": eval_frequency,
        "seeds": seeds,
    }
    metrics = {
        "name": name,
        "config": str(config),
        "train": str(train),
        "dev": str(dev),
        "test": str(test),
        "settings": settings,
        "runs": runs,
    }
    (metrics_dir / f"{name}.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    typer.run(main)
