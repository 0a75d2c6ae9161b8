"""Domain adaptation for spaCy users: fine-tune the biLM's language model on a task's own ``.spacy`` text.

The paper's first source of task gains: before the task trains, the biLM's LM is fine-tuned on the
task's text (labels unused). :func:`adapt` reads the token texts of the training docs (and of the
dev docs, for perplexity), runs the ordinary fine-tuning of :mod:`spacy_elmo.train` from ``init_from``
and writes an ELMo model directory (options.json + weights.hdf5, vocabulary, softmax, metrics.json
with the dev perplexity before and after) that the ``elmo`` component takes as its ``model``
(``[components.elmo.model] path = "OUT"``). ``spacy-elmo adapt`` is its command line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from spacy.tokens import DocBin
from spacy.vocab import Vocab
from tqdm import tqdm

from ..groundwork.atomic_write import write_text_atomically
from ..groundwork.file_names import PathLike
from ..runtime.features.tokenize import is_whitespace
from ..sources.download import is_url
from ..sources.model_paths import VOCAB, check_model_name, is_model_dir, resolve_model_files
from ..sources.published import published_by_url, published_model
from ..train import TrainConfig
from ..train.output_folder.folder_lock import holds_output_folder
from ..train.output_folder.recorded_paths import absolute_path, recorded_argument, recorded_path

# a domain adaptation's output folder, besides the training run's files
ADAPTATION = "adaptation.json"  # what was adapted on, perplexity before / after
ADAPT_TEXT_DIR = "task_text"  # the docs' text, one doc per line, in:
ADAPT_TRAIN_TEXT = "train.txt"
ADAPT_DEV_TEXT = "dev.txt"
WRITTEN_ONLY = frozenset({ADAPTATION})  # written for the user, never read back by the package: no schema

TEXT_DIR = ADAPT_TEXT_DIR  # under the output directory: the docs' text, one doc per line


@dataclass
class AdaptOptions:
    """The fine-tuning run's options that an adaptation usually changes; the rest are TrainConfig's defaults."""

    epochs: float = 1.0
    max_steps: Optional[int] = None
    lr: float = TrainConfig(train=[]).lr
    token_budget: int = TrainConfig(train=[]).token_budget
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)  # any other TrainConfig field, by name


def doc_lines(path: PathLike) -> Iterator[str]:
    """Each doc of a ``.spacy`` file as one line of its space-separated tokens (whitespace tokens left out)."""
    for doc in DocBin().from_disk(Path(path)).get_docs(Vocab()):
        tokens = [token.text for token in doc if not is_whitespace(token.text)]
        if tokens:
            yield " ".join(tokens)


def write_doc_text(source: PathLike, target: PathLike) -> int:
    """Write the docs of ``source`` (``.spacy``) to ``target`` as text, one doc per line; returns the docs written."""
    lines = list(doc_lines(source))
    if not lines:
        raise ValueError(f"{source}: no docs with text (expected a .spacy file of training docs)")
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(target, "\n".join(lines) + "\n")
    return len(lines)


def require_adaptable(init_from: str) -> None:
    """Refuse a published model before anything is downloaded or written: adapting trains the biLM's language
    model, whose vocabulary and softmax published models do not ship (only the biLM, options and weights)."""
    if is_model_dir(Path(init_from).expanduser()):  # a local folder wins over a published name, as everywhere
        return
    check_model_name(init_from)  # "smal": did you mean 'small'?
    entry = published_model(init_from) or (published_by_url(init_from) if is_url(init_from) else None)
    if entry is not None:
        raise ValueError(
            f"--init-from {init_from!r}: published models cannot be adapted; they ship the biLM (options and weights) "
            f"but not the vocabulary and softmax its language model needs. Adapt 'default', or a model written by "
            f"`spacy-elmo train` (its folder holds {VOCAB} and the softmax beside the weights)"
        )


@holds_output_folder  # no other run writes into output_dir until this one ends
def adapt(
    output_dir: PathLike,
    train_docs: PathLike,
    dev_docs: PathLike,
    *,
    init_from: str = "default",
    options: Optional[AdaptOptions] = None,
    progress: bool = False,
    overwrite: bool = False,
    device: Optional[str] = None,
) -> dict[str, Any]:
    """Fine-tune ``init_from``'s LM on the text of ``train_docs``; returns (and saves) the dev perplexity before/after.

    output_dir: the adapted model's directory (an ELMo model: options.json + weights.hdf5 and its softmax).
    train_docs, dev_docs: ``.spacy`` files (e.g. the task's training and dev corpora); only their text is read.
    init_from: the model to start from; it must ship its vocabulary and softmax (as "default" and models
        written by ``spacy-elmo train`` do), or the perplexity before adaptation cannot be measured; a published
        model is refused before it is downloaded (:func:`require_adaptable`).
    progress: say what each phase is doing (a line each) and show the training's progress bar.
    overwrite: replace the model ``output_dir`` already holds (refused otherwise, before anything is written);
        the previous model stays whole until the adapted one is written in full.
    device: where the fine-tuning and both perplexities run: "cpu" (the default), "cuda", "cuda:N" or "auto"
        (CUDA when available); a GPU that is not there is refused before anything is written.
    """
    from ..train import Trainer, evaluate, make_sources  # torch: imported when an adaptation runs
    from ..train.distributed import training_device
    from ..train.run.outputs import refuse_another_model

    training_device(device)
    require_adaptable(init_from)
    options = options or AdaptOptions()
    out = Path(output_dir)
    refuse_another_model(out, overwrite, resume_hint=False)
    text_dir = out / TEXT_DIR
    n_train = write_doc_text(train_docs, text_dir / ADAPT_TRAIN_TEXT)
    n_dev = write_doc_text(dev_docs, text_dir / ADAPT_DEV_TEXT)
    say = tqdm.write if progress else _quiet  # what each phase is doing, beside the training's progress bar
    say(f"dev perplexity of {init_from} before adapting ({n_dev} dev docs)")
    start_dir = resolve_model_files(init_from)[0].parent
    before = evaluate(start_dir, [text_dir / ADAPT_DEV_TEXT], device=device)
    say(f"fine-tuning {init_from} on the text of {n_train} training docs, then the dev perplexity after")
    config = TrainConfig(
        train=[s.to_json() for s in make_sources([text_dir / ADAPT_TRAIN_TEXT])],
        valid=[s.to_json() for s in make_sources([text_dir / ADAPT_DEV_TEXT])],
        epochs=options.epochs,
        max_steps=options.max_steps,
        lr=options.lr,
        token_budget=options.token_budget,
        seed=options.seed,
        init_from=init_from,
        **options.extra,
    )
    metrics = Trainer(config, out, progress=progress, overwrite=overwrite, device=device).run()
    after = evaluate(out, [text_dir / ADAPT_DEV_TEXT], device=device)
    result = {
        "init_from": recorded_argument(str(init_from), out, cwd=Path.cwd()),
        "train_docs": recorded_path(absolute_path(train_docs), out),
        "dev_docs": recorded_path(absolute_path(dev_docs), out),
        "n_train_docs": n_train,
        "n_dev_docs": n_dev,
        "steps": metrics.get("steps"),
        "wall_time_s": metrics.get("wall_time_s"),
        "dev_perplexity_before": before,
        "dev_perplexity_after": after,
    }
    write_text_atomically(out / ADAPTATION, json.dumps(result, indent=2) + "\n")
    return result


def _quiet(line: str) -> None:
    """Say nothing (``progress=False``)."""
