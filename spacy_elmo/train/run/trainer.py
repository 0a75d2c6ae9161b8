"""Train (or fine-tune) a biLM on raw text and export it in the standard ELMo layout.

Output directory::

    options.json, weights.hdf5   the biLM (bilm-tf / AllenNLP format, float32), loadable by load_bilm
    vocab.txt                    the softmax vocabulary (<S>, </S>, <UNK>, then words by frequency)
    softmax.safetensors          the adaptive softmax (needed for perplexity and to continue training)
    metrics.json                 corpus, architecture, perplexities per evaluation and epoch, speed
    checkpoint.safetensors       model + optimizer + position in the data (for --resume)

The exported files always hold the model with the best validation perplexity so far. Nothing is
pickled (see :mod:`.storage`); every file is replaced whole (see :mod:`.outputs`). A loss or
perplexity that stops being finite ends training with :class:`TrainingDiverged` before anything
of that step is saved. The options are :class:`~.config.TrainConfig`'s; a fine-tuning run starts
from :func:`~.init_from.load_initial_model`. Under ``torchrun`` each process trains on its share of
every batch and only rank 0 writes files or prints (see :mod:`.distributed`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import random
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional, Union

import torch
from tqdm import tqdm

from ...bilm.engine.precisions import torch_dtype_name
from ...bilm.exact import exact_float32
from ...bilm.options import BiLMOptions
from ...bilm.weights import options_from_dict
from ...groundwork.file_names import LEGACY_CHECKPOINT, WEIGHTS
from ..config import TrainConfig, check_config
from ..corpus.batching import Batch, CharCache, Vocabulary, bucket_batches, count_words, mixed_sentences, tensorize
from ..corpus.sentences import PathLike, Source, has_tokens, sha256_of
from ..corpus.shards import MANIFEST, CorpusBatches, PreparedCorpus
from ..distributed import SINGLE, World, training_device, weights_digest
from ..network.language_model import LanguageModel, count_parameters
from ..network.precision import autocast, describe, training_dtype, warn_if_emulated
from ..network.presets import architecture
from ..output_folder.folder_lock import claim_folder, hold_claim_while, release_claim_on_error
from ..output_folder.model_card import write_model_card
from ..output_folder.recorded_paths import (
    absolute_path,
    is_path_argument,
    recorded,
    recorded_argument,
    recorded_command,
)
from ..output_folder.stages import continued_reading, earlier_stages, start_stage, update_stage
from ..output_folder.storage import (
    CHECKPOINT,
    Checkpoint,
    TrainingFileError,
    load_checkpoint,
    load_softmax_into,
    require_file,
)
from .evaluation import TextBatches, nll_sums, perplexities, perplexity
from .init_from import load_initial_model, previous_training
from .outputs import (
    export_model,
    jsonable,
    refuse_another_model,
    remove_replaced_run,
    resumed_paths,
    write_checkpoint,
    write_metrics,
)


class TrainingDiverged(ValueError):
    """The loss, a perplexity or the weights stopped being finite (usually: --lr too high); that step is not saved."""


def _sources(items: Sequence[dict[str, str]]) -> list[Source]:
    return [Source(Path(i["path"]), i.get("format", "lines"), i.get("tokenizer", "whitespace")) for i in items]


def _require_tokens(sources: Sequence[Source], option: str, purpose: str, max_length: int) -> None:
    """A ValueError naming the files when ``sources`` hold no token at all (empty or blank files)."""
    if not has_tokens(sources, max_length):
        names = ", ".join(str(s.path) for s in sources)
        raise ValueError(f"{option}: nothing to {purpose} on: no tokens in {names} (empty or blank)")


class Trainer:
    """Owns the model, optimizer, vocabulary and the position in the data; ``run()`` trains.

    ``world``: this process's place among several training processes (:func:`~.distributed.join_world`
    under torchrun); every rank then builds the same trainer, and rank 0 alone writes and prints.
    ``device``: where the model trains, as ``--device`` says (:func:`~.distributed.training_device`: "cpu",
    "cuda", "cuda:N", "auto"); default the world's (one process: the CPU). A checkpoint resumes on any device.
    """

    @release_claim_on_error
    def __init__(
        self,
        config: TrainConfig,
        output_dir: PathLike,
        *,
        resume: bool = False,
        progress: bool = True,
        world: World = SINGLE,
        overwrite: bool = False,
        device: Union[str, torch.device, None] = None,
    ) -> None:
        self.output_dir = Path(output_dir)
        self.world = world
        self.progress = progress and world.is_main
        checkpoint = None
        check_config(config)
        self.device = _device(world, device)
        if resume:
            path = require_file(self.output_dir, CHECKPOINT, LEGACY_CHECKPOINT, "a training checkpoint", "--resume: ")
            checkpoint = load_checkpoint(path)
            config = _resumed_config(checkpoint, config, path, self.output_dir)
            _require_resumed_text(config)
        else:
            config = _from_the_root(config)  # what the run records names them relative to its folder
        self.config = config
        self.dtype = training_dtype(config.precision, self.device)
        self.precision_note = describe(config.precision, self.dtype, self.device)  # printed by the CLI
        warn_if_emulated(self.dtype, self.device)
        self.train_sources = _sources(config.train)
        self.valid_sources = _sources(config.valid)
        # a prepared corpus (spacy-elmo prepare-corpus) replaces the text files, never joins them
        self.prepared = PreparedCorpus(config.corpus) if config.corpus else None
        if checkpoint is not None and self.prepared is not None:
            _require_the_runs_corpus(self.prepared, checkpoint.info.get("state"), self.output_dir)
        if self.prepared is not None and self.train_sources:
            raise ValueError("train either on text files (--train/--raw) or on a prepared corpus (--corpus), not both")
        if not self.train_sources and self.prepared is None:
            raise ValueError("no training text given")
        for source in self.train_sources + self.valid_sources:
            if not source.path.is_file():
                raise FileNotFoundError(f"text file not found: {source.path}")
        if self.prepared is None:
            _require_tokens(self.train_sources, "--train/--raw", "train", config.max_length)
        if self.valid_sources:
            _require_tokens(self.valid_sources, "--valid", "validate", config.max_length)
        # the folder is this run's until run() ends (rank 0 holds it, the one that writes): another run is refused
        self.folder_claim = claim_folder(self.output_dir) if world.is_main else None
        if not resume:  # a new run: never into another model's folder unless asked to replace it (every rank)
            refuse_another_model(self.output_dir, overwrite)
        # the text's sha256 (one read of each file): recorded by a new run; a resumed one's must be the run's, else it
        # would go on at its position in another text
        if resume:
            _require_the_runs_text(config, self.output_dir)
        else:
            config = _with_fingerprints(config)
        self.config = config
        if world.is_main:
            if not resume:
                remove_replaced_run(self.output_dir)
            self.output_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        self.char_cache = CharCache()
        self.run_started = time.time()
        self.wall_counted = False
        self.checkpoint_step: Optional[int] = None  # the step of the newest checkpoint this trainer wrote or read
        # wall time at the end of the last step (this run's and, resumed, the runs' before), the same on every rank
        self.elapsed_s = 0.0
        if checkpoint is not None:
            self._restore(checkpoint, path)
            self.elapsed_s = float(self.state.get("elapsed_s", 0.0))  # a checkpoint before it was kept: 0
        else:
            self._start()
        self.metrics["precision"] = torch_dtype_name(self.dtype)
        self.metrics["device"] = _device_name(self.device)
        if world.size > 1 or "processes" in self.metrics:  # (a resumed run may use another number)
            self.metrics["processes"] = world.size
        if world.size > 1:
            # rank 0 keeps the seeded stream of a single-process run; the others draw other dropout masks
            torch.manual_seed(config.seed * 1_000_003 + 7919 * world.rank + self.state["step"])
        self.network = world.wrap(self.model)  # what a training step calls: DistributedDataParallel with several ranks

    # -- setup ---------------------------------------------------------------------------

    def _start(self) -> None:
        config = self.config
        counts, sources = self._count_words()
        initial = load_initial_model(config.init_from) if config.init_from else None
        if initial is not None:
            options = initial.bilm.options
            config.architecture = options.to_json()
        else:
            raw = config.architecture if isinstance(config.architecture, dict) else architecture(config.architecture)
            options = options_from_dict(raw, source=str(config.architecture))
            config.architecture = raw
        if initial is not None and initial.vocab is not None and initial.softmax is not None:
            self.vocab = initial.vocab
            config.vocab_size = len(initial.vocab)
            config.cutoffs = tuple(initial.softmax.cutoffs)
            config.div_value = initial.softmax.div_value
        elif self.prepared is not None:
            self.vocab = self.prepared.vocabulary(config.vocab_size, config.min_count)
        else:
            self.vocab = Vocabulary.build(counts, config.vocab_size, config.min_count)
        del counts
        self.model = self._build_model(options)
        if initial is not None:
            self.model.load_bilm_weights(initial.bilm)
            if initial.softmax is not None:
                load_softmax_into(self.model.softmax, initial.softmax, initial.softmax_path)
        self.optimizer = adam(self.model.parameters(), config.lr)
        self.state: dict[str, Any] = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "words_seen": 0, "train_seconds": 0.0}
        self.metrics: dict[str, Any] = {
            "command": recorded_command(sys.argv, self.output_dir, cwd=Path.cwd()),
            "config": jsonable(asdict(config)),
            "corpus": {"train": config.train, "valid": config.valid, "prepared": config.corpus, **self.corpus},
            "vocab_size": len(self.vocab),
            "parameters": {
                "bilm": count_parameters(self.model) - count_parameters(self.model.softmax),
                "softmax": count_parameters(self.model.softmax),
            },
            "evaluations": [],
            "epochs": [],
            "best": None,
        }
        if initial is not None:
            self.metrics["init_from"] = previous_training(initial.directory)
        earlier = earlier_stages(initial.directory) if initial is not None else []
        start_stage(self.metrics, earlier, sources, str(initial.directory) if initial is not None else None)
        # as metrics.json will say it: paths relative to the folder or by name (the earlier stages' too)
        self.metrics = recorded(jsonable(self.metrics), self.output_dir)
        if config.continue_corpus and self.prepared is not None:
            reading = continued_reading(earlier, self._corpus_reading(), self.prepared.fingerprint)
            self.state.update(corpus_position=reading["position"], epoch=reading["epoch"])
            self.state["epoch_words"] = reading["epoch_words"]
            if self.state["epoch"] >= math.ceil(config.epochs):
                raise ValueError(
                    f"--continue-corpus: the --init-from model's stages read the corpus {self.state['epoch']} time(s) "
                    f"through already; --epochs {config.epochs:g} would train nothing (count the epochs of all stages)"
                )
        self.best_valid = math.inf  # (the vocabulary is written with the model: export_model)

    def _corpus_reading(self) -> dict[str, Any]:
        """What decides the batches of a prepared corpus besides its shards: a position is only valid with these."""
        config = self.config
        return {
            "seed": config.seed,
            "token_budget": config.token_budget,
            "buffer_size": config.buffer_size,
            "max_length": config.max_length,
        }

    def _count_words(self) -> tuple[Counter, list[dict[str, Any]]]:
        """The counting pass: word counts of text files (a prepared corpus counted its own: empty here), sets
        ``self.corpus``; and the training sources with their word counts (and provenance, for a prepared corpus)."""
        if self.prepared is not None:
            self.corpus = {"words": self.prepared.words, "distinct_words": self.prepared.distinct_words()}
            return Counter(), self.prepared.sources()
        counts: Counter = Counter()
        sources = []
        for source, recorded_source in zip(self.train_sources, self.config.train):
            mine = count_words([source], self.config.max_length)
            sources.append({**recorded_source, "words": int(sum(mine.values()))})
            counts.update(mine)
        self.corpus = {"words": int(sum(counts.values())), "distinct_words": len(counts)}
        return counts, sources

    def _build_model(self, options: BiLMOptions) -> LanguageModel:
        config = self.config
        self.crop_width = max(w for w, _ in options.filters)
        return LanguageModel(
            options, len(self.vocab), config.cutoffs, config.div_value, config.dropout, config.lstm_impl
        ).to(self.device)

    def _restore(self, checkpoint: Checkpoint, path: Path) -> None:
        """Model, optimizer, position, metrics and RNG from a checkpoint; a mismatch is a TrainingFileError."""
        info = checkpoint.info
        try:
            self.vocab = Vocabulary(info["vocab"])
            self.model = self._build_model(options_from_dict(self.config.architecture))
            self.model.load_state_dict(checkpoint.model)
            self.optimizer = adam(self.model.parameters(), self.config.lr)
            self.optimizer.load_state_dict(checkpoint.optimizer)
            _keep_kernel_choice(self.optimizer)
            _check_optimizer_shapes(self.optimizer)
            self.state = dict(info["state"])
            self.metrics = info["metrics"]
            self.corpus = {k: self.metrics["corpus"][k] for k in ("words", "distinct_words")}
            self._record_the_text_read()
            self.best_valid = math.inf if info["best_valid"] is None else float(info["best_valid"])
            torch.set_rng_state(checkpoint.rng)
            cuda_rng = self.state.pop(CUDA_RNG, None)  # a GPU's generator: continued on a GPU, unused on the CPU
            if cuda_rng is not None and self.device.type == "cuda":
                torch.cuda.set_rng_state(torch.tensor(cuda_rng, dtype=torch.uint8), self.device)
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            problem = f"{type(err).__name__}: {err}"
            raise TrainingFileError(f"{path} does not hold a usable training state ({problem})") from err
        self.checkpoint_step = self.state["step"]

    def _record_the_text_read(self) -> None:
        """``metrics.json``'s record of the training and validation text (and prepared corpora) as this resumed run
        reads them: where the command named the run's text elsewhere, that (the same text: checked by its sha256)."""
        config = self.config
        text = {"train": config.train, "valid": config.valid}
        self.metrics["corpus"].update(recorded(jsonable({**text, "prepared": config.corpus}), self.output_dir))
        if isinstance(self.metrics.get("config"), dict):
            self.metrics["config"].update(recorded(jsonable({**text, "corpus": config.corpus}), self.output_dir))

    # -- data ----------------------------------------------------------------------------

    def epoch_batches(self, epoch: int) -> Iterable[list[list[str]]]:
        """The batches of one epoch: the same order for the same seed and epoch (of a prepared corpus: from the
        position in ``state``, see :class:`~.shards.CorpusBatches`)."""
        if self.prepared is not None:
            config = self.config
            start = self.state.get("corpus_position")
            return self.prepared.batches(
                config.seed, epoch, config.token_budget, config.buffer_size, config.max_length, start
            )
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
                done = max(done, min(1.0, self.elapsed_s / (60 * config.max_minutes)))
            lr *= 1.0 - (1.0 - config.min_lr_ratio) * done
        return lr

    # -- training ------------------------------------------------------------------------

    @hold_claim_while
    def run(self) -> dict[str, Any]:
        """Train until ``epochs`` (or ``max_steps`` / ``max_minutes``); returns the metrics.

        Raises :class:`TrainingDiverged` when the loss or a perplexity stops being finite; the files
        then hold the last checkpoint and the last exported model from before.
        """
        started = self.run_started = time.time()
        self.elapsed_s = float(self.state.get("elapsed_s", 0.0))  # --max-minutes counts a resumed run's time before
        clock_start = started - self.elapsed_s
        self.wall_counted = False  # metrics' wall_time_s does not hold this run's yet
        stop = False
        while self.state["epoch"] < math.ceil(self.config.epochs) and not stop:
            totals = {"nll_f": 0.0, "nll_b": 0.0, "n": 0, "words": 0, "seconds": 0.0}
            stop = self._train_epoch(totals, clock_start)
            if not stop:
                self.state["epoch"] += 1
                self.state["batch_in_epoch"] = 0
                self.state["epoch_words"] = 0
            self.validate(totals, partial=stop, epoch_end=not stop)
            self.save_checkpoint()
        self.metrics["wall_time_s"] = round(self.metrics.get("wall_time_s", 0.0) + time.time() - started, 1)
        self.wall_counted = True
        self.metrics["train_seconds"] = round(self.state["train_seconds"], 1)
        self.metrics["words_seen"] = self.state["words_seen"]
        self.metrics["steps"] = self.state["step"]
        self.write_metrics()
        self.save_checkpoint()
        if self.world.is_main and (self.output_dir / WEIGHTS).is_file():
            write_model_card(self.output_dir)
        # DistributedDataParallel keeps the ranks' weights equal: check that it did
        if self.world.size > 1 and not self.world.same(weights_digest(self.model)):
            raise RuntimeError(f"the {self.world.size} training processes ended with different weights")
        self.world.barrier()  # no rank finishes before rank 0 has written everything
        return self.metrics

    def _train_epoch(self, totals: dict[str, float], clock_start: float) -> bool:
        """Train on the current epoch's batches (from where a resumed run stopped); True when a limit stopped it.

        ``clock_start``: when the run would have started had it never stopped (``elapsed_s`` counts from there).
        """
        config = self.config
        epoch = self.state["epoch"]
        words_in_epoch = self.corpus["words"] * min(1.0, config.epochs - epoch)  # a fractional last epoch
        batches = self.epoch_batches(epoch)
        if not isinstance(batches, CorpusBatches):  # text files: skip what was trained already
            batches = itertools.islice(batches, self.state["batch_in_epoch"], None)
        epoch_words_done = self.state.get("epoch_words", 0)
        with tqdm(
            total=int(words_in_epoch), unit="tok", unit_scale=True, desc=f"epoch {epoch + 1}", disable=not self.progress
        ) as bar:
            bar.update(epoch_words_done)
            for sentences in batches:
                if epoch_words_done >= words_in_epoch:
                    break
                mine, weight = self.world.share(sentences)
                batch = tensorize(mine, self.vocab, self.char_cache, self.crop_width).to(self.device)
                tick = time.time()
                nll_f, nll_b, n, words = self.train_step(batch, sentences, weight)
                if isinstance(batches, CorpusBatches):  # where --resume continues: the batch after this one
                    self.state["corpus_position"] = batches.position
                self._tally(totals, nll_f, nll_b, n, words, time.time() - tick)
                epoch_words_done = self.state["epoch_words"]
                bar.update(words)
                self._show_progress(bar, (nll_f + nll_b) / (2 * n), totals)
                step = self.state["step"]
                elapsed = time.time() - clock_start
                if config.max_minutes is not None:  # the slowest rank's clock, so that all ranks stop at one step
                    elapsed = self.world.max(elapsed)
                self.elapsed_s = self.state["elapsed_s"] = elapsed
                out_of_time = config.max_minutes is not None and self.elapsed_s > 60 * config.max_minutes
                out_of_steps = config.max_steps is not None and step >= config.max_steps
                if config.eval_every and step % config.eval_every == 0 and not (out_of_time or out_of_steps):
                    self.validate(totals, partial=True)
                if out_of_time or out_of_steps:
                    return True
                if config.checkpoint_every and step % config.checkpoint_every == 0:
                    self.save_checkpoint()
        return False

    def _tally(self, totals: dict[str, float], nll_f: float, nll_b: float, n: int, words: int, seconds: float) -> None:
        """Add one step to the epoch's running totals and to the trainer's time and place in the epoch."""
        self.state["train_seconds"] += seconds
        totals["nll_f"] += nll_f
        totals["nll_b"] += nll_b
        totals["n"] += n
        totals["words"] += words
        totals["seconds"] += seconds
        self.state["epoch_words"] = self.state.get("epoch_words", 0) + words

    def _show_progress(self, bar: tqdm, loss: float, totals: dict[str, float]) -> None:
        """The progress bar's loss, running perplexities, speed and lr (only when shown; any size of number)."""
        if not self.progress:
            return
        bar.set_postfix(
            loss=_number(loss, 3),
            ppl_f=_number(perplexity(totals["nll_f"] / totals["n"]), 1),
            ppl_b=_number(perplexity(totals["nll_b"] / totals["n"]), 1),
            tok_s=_number(totals["words"] / max(totals["seconds"], 1e-9), 0),
            lr=f"{self.learning_rate():.2e}",
        )

    def train_step(
        self, batch: Batch, sentences: Sequence[Sequence[str]], weight: float = 1.0
    ) -> tuple[float, float, int, int]:
        """One optimizer step on the global batch ``sentences``, of which ``batch`` is this rank's share.

        Returns the NLL sums, predictions per direction and words of the whole global batch. A
        non-finite loss or gradient raises TrainingDiverged (on every rank) before the weights change.
        ``weight`` 0: this rank has no rows of its own (see :meth:`~.distributed.World.share`).
        """
        self.network.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate()
        n = sum(len(s) + 1 for s in sentences)  # predictions per direction: each word and one sentence end
        words = sum(len(s) for s in sentences)
        # every float32 product of the step, forward and backward, without TF32 on a GPU (bilm/exact.py)
        with exact_float32(self.device):
            with autocast(self.dtype, self.device):
                nll_f, nll_b, _ = self.network(batch.chars, batch.token_index, batch.word_ids, batch.lengths)
            # the mean over the global batch: DistributedDataParallel averages the ranks' gradients
            loss = (nll_f + nll_b) / (2 * n / self.world.size)
            if not weight:
                loss = loss * 0.0
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            norm = None
            if self.config.clip_norm:
                norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
        # the step's one wait for the device: the global loss sums (and the gradient norm) read together
        mine = torch.stack([nll_f.detach(), nll_b.detach()]) if weight else nll_f.new_zeros(2)
        read = self.world.total(mine)
        if norm is not None:
            read = torch.cat([read, norm.detach().to(read.device, torch.float64)[None]])
        sum_f, sum_b, *norm_read = read.tolist()
        for direction, total in (("forward", sum_f), ("backward", sum_b)):
            if not math.isfinite(perplexity(total / n)):
                what = f"the {direction} training loss is {total / n:.4g} per token"
                raise self._diverged(what, self.state["step"] + 1)
        if norm_read and not math.isfinite(norm_read[0]):
            raise self._diverged(f"the gradient norm is {norm_read[0]}", self.state["step"] + 1)
        self.optimizer.step()
        self.state["step"] += 1
        self.state["batch_in_epoch"] += 1
        self.state["words_seen"] += words
        return sum_f, sum_b, n, words

    def validate(self, totals: dict[str, float], partial: bool, epoch_end: bool = False) -> Optional[dict[str, float]]:
        """Validation perplexity; exports the model when it is the best so far (always when there is no valid set)."""
        record: dict[str, Any] = {
            "step": self.state["step"],
            "epoch": self.state["epoch"]
            if epoch_end
            else self.state["epoch"] + self.state.get("epoch_words", 0) / max(1, self.corpus["words"]),
            "words_seen": self.state["words_seen"],
        }
        if totals["n"]:
            record["train_ppl_forward"] = round(perplexity(totals["nll_f"] / totals["n"]), 2)
            record["train_ppl_backward"] = round(perplexity(totals["nll_b"] / totals["n"]), 2)
            record["tokens_per_s"] = round(totals["words"] / max(totals["seconds"], 1e-9), 1)
        if self.valid_sources:
            self._say(f"step {record['step']}: computing the validation perplexity")
            part = (self.world.rank, self.world.size)  # each rank a share of the batches, summed
            sums = nll_sums(
                self.model,
                self.vocab,
                self.valid_sources,
                TextBatches(self.config.token_budget, self.config.max_length, self.char_cache, self.crop_width),
                part,
            )
            keys = sorted(sums)
            result = perplexities(dict(zip(keys, self.world.sum([sums[k] for k in keys]))))
            if not math.isfinite(result["mean"]):
                what = f"the validation perplexity is {result['forward']} forward / {result['backward']} backward"
                raise self._diverged(what, self.state["step"])
            record["valid_ppl_forward"] = round(result["forward"], 2)
            record["valid_ppl_backward"] = round(result["backward"], 2)
            record["valid_ppl_mean"] = round(result["mean"], 2)
            score = result["mean"]
        else:
            score = -self.state["step"]  # no validation data: the latest model is the best
        self._say(f"step {record['step']}: " + ", ".join(f"{k}={v}" for k, v in record.items() if "ppl" in k))
        (self.metrics["epochs"] if epoch_end else self.metrics["evaluations"]).append(record)
        if score < self.best_valid:
            self.best_valid = score
            self.metrics["best"] = record
            self.export()
        self.write_metrics()
        return record

    def _say(self, line: str) -> None:
        """One line of what the run is doing, beside the progress bar (only when the bar is shown: rank 0, not
        --no-progress)."""
        if self.progress:
            tqdm.write(line)

    def _diverged(self, what: str, step: int) -> TrainingDiverged:
        """The error for a non-finite loss, perplexity or weight: where, what to change, what the files still hold."""
        best = self.metrics.get("best")
        kept = [
            f"{CHECKPOINT} of step {self.checkpoint_step}"
            if self.checkpoint_step is not None
            else f"no {CHECKPOINT} from this run",
            f"the exported model of step {best['step']}" if best else "no exported model",
        ]
        return TrainingDiverged(
            f"training diverged at step {step}: {what}. Lower --lr (it is {self.config.lr:g}) or warm up longer "
            f"(--warmup-steps). Nothing of this step was saved; {self.output_dir} keeps {' and '.join(kept)}"
        )

    def _require_finite_weights(self) -> None:
        """Refuse to save weights that are inf or NaN (TrainingDiverged); the files on disk stay as they were."""
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise self._diverged("some weights are no longer finite", self.state["step"])

    # -- files ---------------------------------------------------------------------------

    def export(self) -> None:
        """Write options.json, weights.hdf5 and softmax.safetensors for the current model (finite weights only; rank
        0)."""
        self._require_finite_weights()  # on every rank: all raise together (their weights are the same)
        self._say(f"step {self.state['step']}: the best model so far: writing it to {self.output_dir}")
        if self.world.is_main:
            # the exported biLM is built fresh (random init, then overwritten): dropout's stream must not see it, or a
            # resumed run would draw other masks than the uninterrupted one
            with torch.random.fork_rng(devices=[]):
                export_model(self.model, self.output_dir, self.vocab)

    def wall_time_s(self) -> float:
        """Wall time of every run of this model so far: the runs before a --resume and this one until now."""
        return self.metrics.get("wall_time_s", 0.0) + (0.0 if self.wall_counted else time.time() - self.run_started)

    def write_metrics(self) -> None:
        wall = self.wall_time_s()
        update_stage(self.metrics, self.state, wall, self._corpus_reading() if self.prepared is not None else None)
        if self.world.is_main:
            write_metrics(self.output_dir, self.metrics)

    def _state_to_save(self) -> dict[str, Any]:
        """The position in training as the checkpoint keeps it; on a GPU with its random generator's state too
        (dropout's masks: torch's CPU generator is saved beside it, :func:`~.outputs.write_checkpoint`)."""
        if self.device.type != "cuda":
            return self.state
        return {**self.state, CUDA_RNG: torch.cuda.get_rng_state(self.device).tolist()}

    def save_checkpoint(self) -> None:
        """Write checkpoint.safetensors (finite weights only; rank 0), replacing the last one."""
        self._require_finite_weights()
        if self.world.is_main:
            write_checkpoint(
                self.output_dir,
                self.config,
                self.vocab.words,
                self._state_to_save(),
                # this run's time so far too: a run stopped after this checkpoint and resumed still counts it
                {**self.metrics, "wall_time_s": round(self.wall_time_s(), 1)},
                self.best_valid,
                self.model,
                self.optimizer,
            )
        self.checkpoint_step = self.state["step"]


def _from_the_root(config: TrainConfig) -> TrainConfig:
    """``config`` with its text files, prepared corpora and a local ``--init-from`` folder from the root (as this
    process finds them), so that the run's records name each relative to its folder or by name
    (:mod:`.recorded_paths`), wherever the command ran."""
    init_from = config.init_from
    return dataclasses.replace(
        config,
        train=[{**source, "path": absolute_path(source["path"])} for source in config.train],
        valid=[{**source, "path": absolute_path(source["path"])} for source in config.valid],
        corpus=[absolute_path(folder) for folder in config.corpus],
        init_from=absolute_path(init_from) if init_from and is_path_argument(str(init_from)) else init_from,
    )


def _require_resumed_text(config: TrainConfig) -> None:
    """A FileNotFoundError naming the first text file or prepared corpus of a resumed run that is not where its
    checkpoint finds it (from the run's folder, the way the run started) nor where the command names it."""
    wanted = [Path(s["path"]) for s in config.train + config.valid] + [Path(d) / MANIFEST for d in config.corpus]
    for missing in (path for path in wanted if not path.is_file()):
        raise FileNotFoundError(
            f"--resume: the run's text is not at {missing}: name where it is now with --train/--raw, --valid or "
            "--corpus (it is checked against the run's), or move or copy the run folder together with its text"
        )


# what a source of the config records of its file's content (TrainConfig.train and .valid items)
SHA256 = "sha256"


def _with_fingerprints(config: TrainConfig) -> TrainConfig:
    """``config`` with each text file's sha256 recorded beside its path (:func:`~.corpus.sha256_of`: one streamed
    read of each file when the run starts), so that a resumed run can tell its text from another under its name."""
    return dataclasses.replace(
        config,
        train=[{**source, SHA256: sha256_of(source["path"])} for source in config.train],
        valid=[{**source, SHA256: sha256_of(source["path"])} for source in config.valid],
    )


def _require_the_runs_text(config: TrainConfig, output_dir: Path) -> None:
    """A ValueError naming the first text file of a resumed run whose content is not the one its checkpoint
    recorded (its sha256): the run would go on at its position in another text. A checkpoint of a version that
    recorded none is not checked."""
    for sources, role, option in ((config.train, "trained", "--train/--raw"), (config.valid, "validated", "--valid")):
        for source in sources:
            recorded_sha = source.get(SHA256)
            if recorded_sha is None:
                continue
            found = sha256_of(source["path"])
            if found != recorded_sha:
                raise ValueError(
                    f"--resume: {source['path']} is not the text this run {role} on (sha256 {found[:12]}, the run's "
                    f"{recorded_sha[:12]}): name the run's text with {option}, or train on this one in a new run "
                    f"(--init-from {output_dir})"
                )


def _require_the_runs_corpus(prepared: PreparedCorpus, state: Any, output_dir: Path) -> None:
    """A ValueError when the prepared corpus a resumed run opens is not the one its checkpoint's position is in
    (another fingerprint of its shards), before any training: the run would go on in other shards."""
    position = state.get("corpus_position") if isinstance(state, dict) else None
    recorded_fingerprint = position.get("corpus") if isinstance(position, dict) else None
    if recorded_fingerprint is not None and recorded_fingerprint != prepared.fingerprint:
        raise ValueError(
            f"--resume: the prepared corpus {', '.join(map(str, prepared.directories))} is not the one this run "
            f"trained on (shards {prepared.fingerprint}, the run's {recorded_fingerprint}): name the run's corpus "
            f"with --corpus, or train on this one in a new run (--init-from {output_dir})"
        )


def _named_text(given: list[dict[str, str]], saved: list[dict[str, str]], option: str) -> list[dict[str, str]]:
    """A resumed run's text files: where the command names them (``given``, e.g. beside a copied run folder), the
    checkpoint's sources (read as the run read them, checked by their sha256) at those paths; else the checkpoint's
    own. A ValueError when the command names another number of files than the run read."""
    if not given:
        return saved
    if len(given) != len(saved):
        names = ", ".join(Path(source["path"]).name for source in saved) or "none"
        raise ValueError(
            f"--resume: {option} names {len(given)} file(s), the run read {len(saved)} ({names}): name each of them, "
            "in the same order, or none (the checkpoint finds its own from the run's folder)"
        )
    return [{**source, "path": named["path"]} for named, source in zip(given, saved)]


def _resumed_config(checkpoint: Checkpoint, config: TrainConfig, path: Path, output_dir: Path) -> TrainConfig:
    """The checkpoint's config, with the length/time limits (and threads, if given) of ``config`` (checked already);
    its text files and corpora found from ``output_dir``, the checkpoint's folder, as it keeps them."""
    try:
        resumed = resumed_paths(checkpoint.info["config"], output_dir)
        saved = TrainConfig(**{"precision": "float32", **resumed})  # older runs trained in float32
        saved.cutoffs = tuple(int(c) for c in saved.cutoffs)
        for items in (saved.train, saved.valid):
            _sources(items)  # each must be a list of {"path", "format", "tokenizer"}
        # the run's identity comes from the checkpoint; length/time limits may be changed
        for name in RESUME_MAY_CHANGE:
            setattr(saved, name, getattr(config, name))
        saved.threads = config.threads or saved.threads
        check_config(saved)  # what is wrong now came from the checkpoint
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise TrainingFileError(f"{path} holds no valid training config ({type(err).__name__}: {err})") from err
    given = _from_the_root(config)  # compared as the checkpoint keeps them: files from the root, --init-from recorded
    if given.init_from:
        given.init_from = recorded_argument(given.init_from, output_dir)
    _warn_of_ignored_options(given, saved)
    # the text the command names is read instead of the checkpoint's (the same: checked by its fingerprint)
    saved.train = _named_text(given.train, saved.train, "--train/--raw")
    saved.valid = _named_text(given.valid, saved.valid, "--valid")
    if given.corpus:
        named = [{"path": folder} for folder in given.corpus]
        saved.corpus = [d["path"] for d in _named_text(named, [{"path": c} for c in saved.corpus], "--corpus")]
    return saved


# the checkpoint's state key for the GPU's random generator (a list of bytes; the CPU's is a tensor of its own)
CUDA_RNG = "cuda_rng_state"


def _device(world: World, requested: Union[str, torch.device, None]) -> torch.device:
    """The trainer's device: ``requested`` (checked, :func:`~.distributed.training_device`), else the world's; with
    several processes it must be the world's (each rank on its own GPU)."""
    if requested is None:
        return world.device
    device = training_device(requested, world.local_rank, world.local_size if world.size > 1 else 1)
    if world.size > 1 and device != world.device:
        raise ValueError(f"--device {requested}: the training processes joined their group on {world.device}")
    return device


def _device_name(device: torch.device) -> str:
    """The device as metrics.json records it: "cpu", or "cuda:0 (NVIDIA H200)"."""
    return f"{device} ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else str(device)


RESUME_MAY_CHANGE = ("epochs", "max_steps", "max_minutes", "eval_every", "checkpoint_every")
# given to a resumed run, used (not ignored): threads, and where the run's text is (checked against its fingerprints)
_NAMED_ON_RESUME = ("threads", "train", "valid", "corpus")


def _warn_of_ignored_options(given: TrainConfig, saved: TrainConfig) -> None:
    """A warning naming each option given to a resumed run (not its default) that the checkpoint's value overrides."""
    ignored = []
    for config_field in dataclasses.fields(TrainConfig):
        name = config_field.name
        if name in RESUME_MAY_CHANGE or name in _NAMED_ON_RESUME:
            continue
        if config_field.default_factory is not dataclasses.MISSING:
            default = config_field.default_factory()
        elif config_field.default is not dataclasses.MISSING:
            default = config_field.default
        else:  # a field every config names (the training files): given empty, it was not given
            default = ()
        value, kept = _comparable(getattr(given, name)), _comparable(getattr(saved, name))
        if name == "architecture" and isinstance(value, (str, Path)) and value != default:
            with contextlib.suppress(OSError, ValueError):
                value = architecture(value)  # the checkpoint holds the resolved dict
        if value != _comparable(default) and value != kept:
            ignored.append(f"{name}={value!r} (the checkpoint's: {kept!r})")
    if ignored:
        warnings.warn(
            "--resume continues the checkpoint's run with its own settings; ignored: "
            + ", ".join(ignored)
            + f". Only {', '.join(RESUME_MAY_CHANGE)} and threads may change; start a new run (--init-from the "
            "exported model) to train with other settings.",
            stacklevel=5,  # the caller of Trainer(...) (past its release_claim_on_error)
        )


def _comparable(value: Any) -> Any:
    """``value`` with lists as tuples (a config read back from JSON holds lists where a new one may hold tuples)."""
    return tuple(value) if isinstance(value, list) else value


def adam(parameters: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam on torch's fused kernel where this torch has one for the parameters' device, else its default kernel.

    The fused kernel updates every tensor in one pass (CPU: torch >= 2.4; measured in benchmarks/RESULTS.md,
    "Training speed: per-row records"). It computes the same update to float32 rounding, and is as deterministic.
    """
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    except RuntimeError:  # no fused kernel for this device in this torch
        return torch.optim.Adam(parameters, lr=lr)


def _keep_kernel_choice(optimizer: torch.optim.Optimizer) -> None:
    """After ``load_state_dict`` (which restores the saved param groups, kernel flags included): this torch's choice."""
    fused = optimizer.defaults.get("fused")
    for group in optimizer.param_groups:
        group["fused"] = fused


def _check_optimizer_shapes(optimizer: torch.optim.Optimizer) -> None:
    """A ValueError when a restored optimizer tensor (e.g. Adam's exp_avg) does not have its parameter's shape."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise ValueError(
                        f"optimizer {key} has shape {tuple(value.shape)}, its parameter {tuple(param.shape)}"
                    )


def _number(value: float, decimals: int) -> str:
    """A number for the progress bar: fixed-point while it is short, else scientific (inf and nan as such)."""
    if not math.isfinite(value) or abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.{decimals}f}"


def train(
    config: TrainConfig,
    output_dir: PathLike,
    *,
    resume: bool = False,
    progress: bool = True,
    world: World = SINGLE,
    overwrite: bool = False,
    device: Union[str, torch.device, None] = None,
) -> dict[str, Any]:
    """Train a biLM as ``config`` says and write it to ``output_dir``; returns the metrics.

    A new run (not ``resume``) refuses a folder that already holds a model unless ``overwrite``. ``device``: "cpu"
    (the default), "cuda", "cuda:N" or "auto" (CUDA when available), as ``spacy-elmo train --device``.
    """
    return Trainer(
        config, output_dir, resume=resume, progress=progress, world=world, overwrite=overwrite, device=device
    ).run()
