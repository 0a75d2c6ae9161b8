"""Train (or fine-tune) a biLM on raw text and export it in the standard ELMo layout.

Output directory::

    options.json, weights.hdf5   the biLM (bilm-tf / AllenNLP format, float32), loadable by load_bilm
    vocab.txt                    the softmax vocabulary (<S>, </S>, <UNK>, then words by frequency)
    softmax.pt                   the adaptive softmax (needed for perplexity and to continue training)
    metrics.json                 corpus, architecture, perplexities per evaluation and epoch, speed
    checkpoint.pt                model + optimizer + position in the data (for --resume)

The exported files always hold the model with the best validation perplexity so far.
"""
from __future__ import annotations

import json
import math
import os
import random
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
from tqdm import tqdm

from ..bilm.model import BiLMOptions
from ..bilm.weights import load_model, options_from_dict, save_model
from .batching import Batch, CharCache, Vocabulary, bucket_batches, count_words, mixed_sentences, tensorize
from .corpus import PathLike, Source
from .evaluate import perplexity_on
from .model_card import write_model_card
from .network import LanguageModel, count_parameters
from .presets import architecture

CHECKPOINT = "checkpoint.pt"
SOFTMAX = "softmax.pt"
VOCAB = "vocab.txt"
METRICS = "metrics.json"


@dataclass
class TrainConfig:
    """Every training option; stored in the checkpoint and in ``metrics.json``."""

    train: List[Dict[str, str]]  # Source.to_json() of each training file
    valid: List[Dict[str, str]] = field(default_factory=list)
    architecture: Any = "small"  # preset name, JSON path, or an options dict
    vocab_size: int = 40000  # softmax words, the three markers included
    min_count: int = 1
    epochs: float = 1.0
    token_budget: int = 4096  # padded tokens per batch
    lr: float = 2e-3
    lr_schedule: str = "linear"  # "linear" decay to lr * min_lr_ratio over the planned epochs, or "constant"
    min_lr_ratio: float = 0.05
    warmup_steps: int = 100
    clip_norm: float = 1.0
    dropout: float = 0.0
    seed: int = 0
    max_length: int = 100
    cutoffs: Tuple[int, ...] = (2000, 10000)
    div_value: float = 2.0
    eval_every: int = 0  # also validate every N steps (0: only at the end of each epoch)
    checkpoint_every: int = 200  # steps between checkpoints
    max_steps: Optional[int] = None
    max_minutes: Optional[float] = None  # stop (after a validation and an export) after this much wall time
    threads: Optional[int] = None
    lstm_impl: str = "auto"
    init_from: Optional[str] = None
    buffer_size: int = 20000  # sentences held at once for length bucketing


def _sources(items: Sequence[Dict[str, str]]) -> List[Source]:
    return [Source(Path(i["path"]), i.get("format", "lines"), i.get("tokenizer", "whitespace")) for i in items]


class Trainer:
    """Owns the model, optimizer, vocabulary and the position in the data; ``run()`` trains."""

    def __init__(self, config: TrainConfig, output_dir: PathLike, *, resume: bool = False, progress: bool = True) -> None:
        self.output_dir = Path(output_dir)
        self.progress = progress
        checkpoint = None
        if resume:
            path = self.output_dir / CHECKPOINT
            if not path.is_file():
                raise FileNotFoundError(f"--resume: no {CHECKPOINT} in {self.output_dir}")
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
            saved = TrainConfig(**checkpoint["config"])
            # the run's identity comes from the checkpoint; length/time limits may be changed
            for name in ("epochs", "max_steps", "max_minutes", "eval_every", "checkpoint_every"):
                setattr(saved, name, getattr(config, name))
            saved.threads = config.threads or saved.threads
            config = saved
        self.config = config
        if config.threads:
            torch.set_num_threads(int(config.threads))
        self.train_sources = _sources(config.train)
        self.valid_sources = _sources(config.valid)
        if not self.train_sources:
            raise ValueError("no training text given")
        for source in self.train_sources + self.valid_sources:
            if not source.path.is_file():
                raise FileNotFoundError(f"text file not found: {source.path}")
        self.output_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        self.char_cache = CharCache()
        self.run_started = time.time()
        if checkpoint is not None:
            self._restore(checkpoint)
        else:
            self._start()

    # -- setup ---------------------------------------------------------------------------

    def _start(self) -> None:
        config = self.config
        counts = count_words(self.train_sources, config.max_length)
        self.corpus = {"words": int(sum(counts.values())), "distinct_words": len(counts)}
        initial = None
        init_vocab = init_softmax = None
        if config.init_from:
            from ..backend import resolve_model_files

            options_path, weights_path = resolve_model_files(config.init_from)
            initial = load_model(options_path, weights_path)
            options = initial.options
            directory = options_path.parent
            if (directory / VOCAB).is_file() and (directory / SOFTMAX).is_file():
                init_vocab = Vocabulary.load(directory / VOCAB)
                init_softmax = torch.load(directory / SOFTMAX, map_location="cpu", weights_only=True)
            config.architecture = options.to_json()
        else:
            raw = config.architecture if isinstance(config.architecture, dict) else architecture(config.architecture)
            options = options_from_dict(raw, source=str(config.architecture))
            config.architecture = raw
        if init_vocab is not None:
            self.vocab = init_vocab
            config.vocab_size = len(init_vocab)
            config.cutoffs = tuple(init_softmax["cutoffs"])
            config.div_value = float(init_softmax["div_value"])
        else:
            self.vocab = Vocabulary.build(counts, config.vocab_size, config.min_count)
        self.model = self._build_model(options)
        if initial is not None:
            self.model.load_bilm_weights(initial)
            if init_softmax is not None:
                self.model.softmax.load_state_dict(init_softmax["state_dict"])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr)
        self.state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "words_seen": 0, "train_seconds": 0.0}
        self.metrics: Dict[str, Any] = {
            "command": " ".join(shlex.quote(a) for a in sys.argv),
            "config": _jsonable(asdict(config)),
            "corpus": {"train": config.train, "valid": config.valid, **self.corpus},
            "vocab_size": len(self.vocab),
            "parameters": {"bilm": count_parameters(self.model) - count_parameters(self.model.softmax),
                           "softmax": count_parameters(self.model.softmax)},
            "evaluations": [],
            "epochs": [],
            "best": None,
        }
        if config.init_from:
            self.metrics["init_from"] = previous_training(Path(config.init_from))
        self.vocab.save(self.output_dir / VOCAB)
        self.best_valid = math.inf

    def _build_model(self, options: BiLMOptions) -> LanguageModel:
        config = self.config
        self.crop_width = max(w for w, _ in options.filters)
        return LanguageModel(options, len(self.vocab), config.cutoffs, config.div_value, config.dropout, config.lstm_impl)

    def _restore(self, checkpoint: Dict[str, Any]) -> None:
        self.vocab = Vocabulary(checkpoint["vocab"])
        options = options_from_dict(self.config.architecture)
        self.model = self._build_model(options)
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config.lr)
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.state = checkpoint["state"]
        self.metrics = checkpoint["metrics"]
        self.corpus = {k: self.metrics["corpus"][k] for k in ("words", "distinct_words")}
        self.best_valid = checkpoint["best_valid"]
        torch.set_rng_state(checkpoint["torch_rng"])

    # -- data ----------------------------------------------------------------------------

    def epoch_batches(self, epoch: int) -> Iterator[List[List[str]]]:
        """The batches of one epoch: the same order for the same seed and epoch."""
        seed = self.config.seed * 1_000_003 + epoch
        sentences = mixed_sentences(self.train_sources, seed, self.config.max_length)
        return bucket_batches(sentences, self.config.token_budget, self.config.buffer_size, random.Random(seed))

    def learning_rate(self) -> float:
        config = self.config
        step = self.state["step"]
        lr = config.lr * min(1.0, (step + 1) / max(1, config.warmup_steps))
        if config.lr_schedule == "linear":
            planned = max(1, config.epochs * self.corpus["words"])
            done = min(1.0, self.state["words_seen"] / planned)
            if config.max_minutes:  # a time limit: be fully decayed when it is reached
                done = max(done, min(1.0, (time.time() - self.run_started) / (60 * config.max_minutes)))
            lr *= 1.0 - (1.0 - config.min_lr_ratio) * done
        return lr

    # -- training ------------------------------------------------------------------------

    def run(self) -> Dict[str, Any]:
        """Train until ``epochs`` (or ``max_steps`` / ``max_minutes``); returns the metrics."""
        config = self.config
        started = self.run_started = time.time()
        stop = False
        n_epochs = math.ceil(config.epochs)
        while self.state["epoch"] < n_epochs and not stop:
            epoch = self.state["epoch"]
            epoch_limit = config.epochs - epoch  # a fractional last epoch
            words_in_epoch = self.corpus["words"] * min(1.0, epoch_limit)
            batches = self.epoch_batches(epoch)
            for _ in range(self.state["batch_in_epoch"]):  # resume: skip what was trained already
                next(batches, None)
            totals = {"nll_f": 0.0, "nll_b": 0.0, "n": 0, "words": 0, "seconds": 0.0}
            bar = tqdm(total=int(words_in_epoch), unit="tok", unit_scale=True, desc=f"epoch {epoch + 1}", disable=not self.progress)
            epoch_words_done = self.state.get("epoch_words", 0)
            bar.update(epoch_words_done)
            for sentences in batches:
                if epoch_words_done >= words_in_epoch:
                    break
                batch = tensorize(sentences, self.vocab, self.char_cache, self.crop_width)
                tick = time.time()
                nll_f, nll_b, n = self.train_step(batch)
                seconds = time.time() - tick
                self.state["train_seconds"] += seconds
                totals["nll_f"] += nll_f
                totals["nll_b"] += nll_b
                totals["n"] += n
                totals["words"] += batch.n_words
                totals["seconds"] += seconds
                epoch_words_done += batch.n_words
                self.state["epoch_words"] = epoch_words_done
                bar.update(batch.n_words)
                bar.set_postfix(
                    loss=f"{(nll_f + nll_b) / (2 * n):.3f}",
                    ppl_f=f"{math.exp(totals['nll_f'] / totals['n']):.1f}",
                    ppl_b=f"{math.exp(totals['nll_b'] / totals['n']):.1f}",
                    tok_s=f"{totals['words'] / max(totals['seconds'], 1e-9):.0f}",
                    lr=f"{self.learning_rate():.2e}",
                )
                step = self.state["step"]
                out_of_time = config.max_minutes is not None and time.time() - started > 60 * config.max_minutes
                out_of_steps = config.max_steps is not None and step >= config.max_steps
                if config.eval_every and step % config.eval_every == 0 and not (out_of_time or out_of_steps):
                    self.validate(totals, partial=True)
                if out_of_time or out_of_steps:
                    stop = True
                    break
                if config.checkpoint_every and step % config.checkpoint_every == 0:
                    self.save_checkpoint()
            bar.close()
            if not stop:
                self.state["epoch"] += 1
                self.state["batch_in_epoch"] = 0
                self.state["epoch_words"] = 0
            self.validate(totals, partial=stop, epoch_end=not stop)
            self.save_checkpoint()
        self.metrics["wall_time_s"] = round(self.metrics.get("wall_time_s", 0.0) + time.time() - started, 1)
        self.metrics["train_seconds"] = round(self.state["train_seconds"], 1)
        self.metrics["words_seen"] = self.state["words_seen"]
        self.metrics["steps"] = self.state["step"]
        self.write_metrics()
        self.save_checkpoint()
        if (self.output_dir / "weights.hdf5").is_file():
            write_model_card(self.output_dir)
        return self.metrics

    def train_step(self, batch: Batch) -> Tuple[float, float, int]:
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        nll_f, nll_b, n = self.model(batch.chars, batch.token_index, batch.word_ids, batch.lengths)
        loss = (nll_f + nll_b) / (2 * n)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.config.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        self.optimizer.step()
        self.state["step"] += 1
        self.state["batch_in_epoch"] += 1
        self.state["words_seen"] += batch.n_words
        return float(nll_f.detach()), float(nll_b.detach()), n

    def validate(self, totals: Dict[str, float], partial: bool, epoch_end: bool = False) -> Optional[Dict[str, float]]:
        """Validation perplexity; exports the model when it is the best so far (always when there is no valid set)."""
        record: Dict[str, Any] = {
            "step": self.state["step"],
            "epoch": self.state["epoch"] if epoch_end else self.state["epoch"] + self.state.get("epoch_words", 0) / max(1, self.corpus["words"]),
            "words_seen": self.state["words_seen"],
        }
        if totals["n"]:
            record["train_ppl_forward"] = round(math.exp(totals["nll_f"] / totals["n"]), 2)
            record["train_ppl_backward"] = round(math.exp(totals["nll_b"] / totals["n"]), 2)
            record["tokens_per_s"] = round(totals["words"] / max(totals["seconds"], 1e-9), 1)
        if self.valid_sources:
            result = perplexity_on(
                self.model, self.vocab, self.valid_sources, self.config.token_budget, self.config.max_length, self.char_cache, self.crop_width
            )
            record["valid_ppl_forward"] = round(result["forward"], 2)
            record["valid_ppl_backward"] = round(result["backward"], 2)
            record["valid_ppl_mean"] = round(result["mean"], 2)
            score = result["mean"]
        else:
            score = -self.state["step"]  # no validation data: the latest model is the best
        if self.progress:
            tqdm.write(f"step {record['step']}: " + ", ".join(f"{k}={v}" for k, v in record.items() if "ppl" in k))
        (self.metrics["epochs"] if epoch_end else self.metrics["evaluations"]).append(record)
        if score < self.best_valid:
            self.best_valid = score
            self.metrics["best"] = record
            self.export()
        self.write_metrics()
        return record

    # -- files ---------------------------------------------------------------------------

    def export(self) -> None:
        """Write options.json, weights.hdf5 and softmax.pt for the current model."""
        save_model(self.model.to_bilm(), self.output_dir)
        save_softmax(self.model, self.output_dir / SOFTMAX)

    def write_metrics(self) -> None:
        _atomic_write(self.output_dir / METRICS, json.dumps(_jsonable(self.metrics), indent=2) + "\n")

    def save_checkpoint(self) -> None:
        checkpoint = {
            "config": asdict(self.config),
            "vocab": self.vocab.words,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "state": self.state,
            "metrics": self.metrics,
            "best_valid": self.best_valid,
            "torch_rng": torch.get_rng_state(),
        }
        path = self.output_dir / CHECKPOINT
        tmp = path.with_name(path.name + ".tmp")
        torch.save(checkpoint, tmp)
        os.replace(tmp, path)


def previous_training(directory: Path) -> Dict[str, Any]:
    """How the model a fine-tuning run starts from was trained (from its metrics.json), kept as a chain."""
    from ..backend import resolve_model_files

    directory = resolve_model_files(directory)[0].parent
    path = directory / METRICS
    if not path.is_file():
        return {"model": str(directory)}
    metrics = json.loads(path.read_text(encoding="utf-8"))
    best = metrics.get("best") or {}
    return {
        "model": str(directory),
        "command": metrics.get("command"),
        "steps": metrics.get("steps", best.get("step")),
        "words_seen": metrics.get("words_seen", best.get("words_seen")),
        "wall_time_s": metrics.get("wall_time_s"),
        "best": best,
        "init_from": metrics.get("init_from"),
    }


def save_softmax(model: LanguageModel, path: Path) -> None:
    """The output layer as a small float32 state dict (plus what is needed to rebuild it)."""
    softmax = model.softmax
    payload = {
        "state_dict": {k: v.detach().float().cpu().clone() for k, v in softmax.state_dict().items()},
        "n_classes": softmax.n_classes,
        "cutoffs": list(softmax.cutoffs[:-1]),
        "div_value": float(softmax.div_value),
        "in_features": softmax.in_features,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def train(config: TrainConfig, output_dir: PathLike, *, resume: bool = False, progress: bool = True) -> Dict[str, Any]:
    """Train a biLM as ``config`` says and write it to ``output_dir``; returns the metrics."""
    return Trainer(config, output_dir, resume=resume, progress=progress).run()
