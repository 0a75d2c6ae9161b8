"""Training in stages: what ``metrics.json`` says of every run a model went through, and the words seen by all.

A model may be trained in several runs, each continuing the exported model of the last with
``--init-from``. ``metrics.json`` keeps a ``stages`` list, oldest first, the current run last, and
``total_words_seen`` = the sum of their ``words_seen``. A stage records its command, the model it
started from, its sources (with the provenance a prepared corpus holds: repository, commit, path,
licence, words), the words it saw, its steps, wall time and best validation perplexity.

The stages of the ``--init-from`` model come from its ``metrics.json``: its ``stages``, or for a
model trained before stages were recorded, one stage per run of its ``init_from`` chain. A model
without ``metrics.json`` (a released ELMo) adds none: its training is not this package's to count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ...bilm.file_formats import Metrics
from ...groundwork.file_names import METRICS, PathLike
from ...groundwork.schema_check import read_json_file


def _perplexity(best: Optional[dict[str, Any]]) -> Optional[dict[str, float]]:
    """A run's best validation perplexity (forward, backward, mean), or None without validation."""
    if not best or "valid_ppl_forward" not in best:
        return None
    return {k: best[f"valid_ppl_{k}"] for k in ("forward", "backward", "mean") if f"valid_ppl_{k}" in best}


def _old_stage(record: dict[str, Any], sources: list[dict[str, Any]]) -> dict[str, Any]:
    """A stage from the metrics (or an ``init_from`` link) of a run that recorded no stages."""
    return {
        "command": record.get("command"),
        "sources": sources,
        "words_seen": int(record.get("words_seen") or 0),
        "steps": record.get("steps"),
        "wall_time_s": record.get("wall_time_s"),
        "train_seconds": record.get("train_seconds"),
        "valid_perplexity": _perplexity(record.get("best")),
    }


INIT_FROM_ADVICE = "correct it, or delete it to fine-tune the model without its training history"


def read_metrics(path: Path, advice: str) -> dict[str, Any]:
    """A model's ``metrics.json``, checked against its schema (:class:`~spacy_elmo.bilm.file_formats.Metrics`); a
    ValueError naming the file, the field and ``advice`` otherwise."""
    metrics: dict[str, Any] = read_json_file(path, Metrics, advice)
    return metrics


def earlier_stages(model_dir: PathLike) -> list[dict[str, Any]]:
    """The stages that made the model in ``model_dir`` (from its metrics.json), oldest first; [] without one."""
    path = Path(model_dir) / METRICS
    if not path.is_file():
        return []
    metrics = read_metrics(path, INIT_FROM_ADVICE)
    if isinstance(metrics.get("stages"), list):
        return [dict(stage) for stage in metrics["stages"]]
    sources = [dict(s) for s in (metrics.get("corpus") or {}).get("train", [])]
    chain = [_old_stage(metrics, sources)]
    link = metrics.get("init_from")
    while isinstance(link, dict) and link.get("command"):
        chain.append(_old_stage(link, []))  # older runs recorded their command only: it names their files
        link = link.get("init_from")
    return list(reversed(chain))


def start_stage(
    metrics: dict[str, Any], earlier: list[dict[str, Any]], sources: list[dict[str, Any]], started_from: Optional[str]
) -> None:
    """Open this run's stage (the last of ``metrics["stages"]``), after the ``earlier`` ones."""
    stage = {
        "command": metrics.get("command"),
        "started_from": started_from,
        "sources": sources,
        "words_seen": 0,
        "steps": 0,
        "wall_time_s": 0.0,
        "train_seconds": 0.0,
        "valid_perplexity": None,
    }
    metrics["stages"] = [*earlier, stage]
    metrics["total_words_seen"] = sum(int(s.get("words_seen") or 0) for s in metrics["stages"])


def update_stage(
    metrics: dict[str, Any], state: dict[str, Any], wall_time_s: float, reading: Optional[dict[str, Any]] = None
) -> None:
    """Bring this run's stage (the last) and ``total_words_seen`` up to date with the trainer's ``state``.

    ``reading`` (training on a prepared corpus): how the corpus is read (seed, token budget, buffer, max length);
    the stage then records it with the position after its last batch, where ``--continue-corpus`` starts.
    """
    stages = metrics.get("stages")
    if not stages:  # a checkpoint of a version that recorded no stages
        start_stage(metrics, [], [], None)
        stages = metrics["stages"]
    stages[-1].update(
        words_seen=int(state["words_seen"]),
        steps=int(state["step"]),
        wall_time_s=round(wall_time_s, 1),
        train_seconds=round(float(state["train_seconds"]), 1),
        valid_perplexity=_perplexity(metrics.get("best")),
    )
    if reading is not None and state.get("corpus_position") is not None:
        stages[-1]["corpus_reading"] = {
            **reading,
            "position": dict(state["corpus_position"]),
            "epoch": int(state["epoch"]),
            "epoch_words": int(state.get("epoch_words", 0)),
        }
    metrics["total_words_seen"] = sum(int(s.get("words_seen") or 0) for s in stages)


def continued_reading(earlier: list[dict[str, Any]], reading: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    """Where ``--continue-corpus`` starts: the last earlier stage's corpus position, epoch and words read in it.

    ``reading``: this run's seed, token budget, buffer and max length; ``fingerprint``: its corpus's. A stage that
    read another corpus, or read it otherwise (another seed gives another shard order), is refused by name: its
    position would point into a different sequence of batches.
    """
    last = earlier[-1] if earlier else {}
    recorded = last.get("corpus_reading")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("position"), dict):
        raise ValueError(
            "--continue-corpus: the --init-from model's metrics.json records no position in a prepared corpus "
            "(its last stage did not train on one with this version): drop --continue-corpus"
        )
    if recorded["position"].get("corpus") != fingerprint:
        raise ValueError(
            "--continue-corpus: the --init-from model was trained on another prepared corpus (other shards); give "
            "the same --corpus directories in the same order, or drop --continue-corpus"
        )
    differ = [f"{k} {recorded.get(k)!r} there, {v!r} here" for k, v in reading.items() if recorded.get(k) != v]
    if differ:
        raise ValueError(f"--continue-corpus: the corpus would be read in another order ({'; '.join(differ)})")
    return {
        "position": dict(recorded["position"]),
        "epoch": int(recorded["epoch"]),
        "epoch_words": int(recorded["epoch_words"]),
    }


def describe_source(source: dict[str, Any]) -> str:
    """One source in a line of Markdown: file or folder, layout, provenance, licence, words."""
    info = source.get("info") or {}
    where = f"`{Path(source['path']).name}`"
    if info.get("repository"):
        origin = info["repository"] + (f"@{str(info['commit'])[:12]}" if info.get("commit") else "")
        where += f" ({origin}" + (f" `{info['path']}`" if info.get("path") else "") + ")"
    parts = [where, source.get("layout") or source.get("format") or ""]
    if info.get("licence"):
        parts.append(str(info["licence"]))
    if source.get("words") is not None:
        parts.append(f"{int(source['words']):,} words")
    return ", ".join(p for p in parts if p)


__all__ = ["continued_reading", "describe_source", "earlier_stages", "start_stage", "update_stage"]
