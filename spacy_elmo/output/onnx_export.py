"""Export a biLM to an ONNX folder, checked against the torch float32 path before anything is written.

:func:`export_onnx` loads the model's float32 weights (any model :func:`spacy_elmo.load_bilm` takes), builds the two
graphs (:mod:`spacy_elmo.onnx.graph`), runs them on ONNX Runtime over :data:`CHECK_SENTENCES` and compares each
layer with what the torch path (the torch runner the backend computes with) gives. It writes the folder (the graphs,
``manifest.json``, :mod:`spacy_elmo.onnx.manifest`, and an ELMoForManyLangs model's dictionaries) only when every
layer agrees within ``tolerance`` of that layer's largest absolute value, and writes it whole
(:func:`~spacy_elmo.groundwork.atomic_write.atomic_path`): a failed check or an error leaves nothing.
``precision="int8"`` (``--precision int8``) quantizes the graphs (:mod:`spacy_elmo.onnx.quantize`) before that
check, which then holds them to int8's wider bound.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ..about import __version__
from ..bilm.engine.precisions import PrecisionLike, check
from ..bilm.manylangs_files import CHAR_DIC, WORD_DIC
from ..bilm.manylangs_tokens import ManyLangsVocabulary, lexicon_text, parse_lexicon
from ..bilm.weights import WeightFileError
from ..groundwork.atomic_write import atomic_path, reported_as, write_json_atomically
from ..groundwork.file_names import PathLike
from ..onnx.graph import OPSET, serialized_graphs
from ..onnx.manifest import (
    EXPORT_PRECISIONS,
    FORMAT,
    FORMAT_VERSION,
    GRAPH_FILES,
    MANIFEST,
    manifest_options,
    token_settings,
)
from ..onnx.quantize import INT8_TOLERANCE, quantized_graphs
from ..onnx.runner import OnnxBiLM, import_onnxruntime
from ..onnx.token_spelling import ELMO_CHARS, manylangs_spelling

if TYPE_CHECKING:  # pragma: no cover
    from ..bilm.model import BiLM

logger = logging.getLogger(__name__)

TOLERANCE = 1e-5  # the largest error allowed, relative to each layer's largest absolute value

# what the check runs, as one batch and each alone: varied lengths (one token to a long one), punctuation, digits,
# non-ASCII letters, a word longer than the 48 bytes a token keeps, repeated words
CHECK_SENTENCES: list[list[str]] = [
    text.split(" ")
    for text in (
        "Hello world !",
        "Yes",
        "The quick brown fox jumps over the lazy dog , and then it sleeps .",
        "In 1997 , Dr. Smith-Jones paid $ 3,400.50 for a 19th-century map ( signed ) ; really ?",
        "Pneumonoultramicroscopicsilicovolcanoconiosis and antidisestablishmentarianismantidisestablishment .",
        "Zoë visited Kraków , São Paulo and 東京 — naïve café déjà vu .",
        "the the the the the of of of and and , , . .",
        "It was the best of times , it was the worst of times , it was the age of wisdom , it was the age of "
        "foolishness , it was the epoch of belief , it was the epoch of incredulity , it was the season of Light .",
        "#hashtag @user https://example.com/a?b=c :-) ... --",
        "a b",
    )
]


class OnnxExportError(ValueError):
    """An export that was refused: the folder exists, a package is missing, or the graphs disagree with torch."""


@dataclass(frozen=True)
class OnnxExport:
    """What :func:`export_onnx` wrote and measured."""

    folder: Path
    max_relative_error: float  # the largest of ``layer_errors``
    layer_errors: tuple[float, ...]  # per layer: max |onnx - torch| / max |torch| over the check sentences
    fingerprint: str  # the source model's
    precision: str  # what the graphs compute in: a name of EXPORT_PRECISIONS


def layer_errors(ours: list[np.ndarray], reference: list[np.ndarray]) -> list[float]:
    """Per layer, the largest ``|ours - reference|`` over all sentences relative to the reference layer's largest
    absolute value (the layer's scale; an all-zero layer counts its absolute error)."""
    n_layers = reference[0].shape[0]
    errors = []
    for layer in range(n_layers):
        diff = max(float(np.abs(a[layer] - b[layer]).max(initial=0.0)) for a, b in zip(ours, reference))
        scale = max(float(np.abs(b[layer]).max(initial=0.0)) for b in reference)
        errors.append(diff / scale if scale > 0 else diff)
    return errors


def _dictionaries(bilm: BiLM) -> tuple[Optional[ManyLangsVocabulary], dict[str, bytes]]:
    """What the folder needs besides the graphs to spell tokens: for an ELMoForManyLangs model its dictionaries'
    files and the vocabulary read back from them (what a runner of the folder will read, so that the check covers
    them); for ELMo's char ids nothing."""
    from ..bilm.manylangs import ManyLangsTokenEncoder

    encoder = bilm.token_encoder
    if not isinstance(encoder, ManyLangsTokenEncoder):
        return None, {}
    vocabulary = encoder.vocabulary
    lexicons = {CHAR_DIC: vocabulary.chars, WORD_DIC: vocabulary.words}
    texts = {name: lexicon_text(lexicon) for name, lexicon in lexicons.items() if lexicon is not None}
    read = {name: parse_lexicon(text, name, ()) for name, text in texts.items()}
    for name in read:
        if read[name] != lexicons[name]:
            raise OnnxExportError(
                f"{name}: the model's dictionary holds a token that a .dic file cannot (a line break, a tab or "
                "spaces around it): not exported"
            )
    files = {name: text.encode("utf-8") for name, text in texts.items()}
    return ManyLangsVocabulary(read[CHAR_DIC], read.get(WORD_DIC), vocabulary.max_chars), files


def export_precision(value: PrecisionLike) -> str:
    """The precision an export is asked for: a name of :data:`~spacy_elmo.onnx.manifest.EXPORT_PRECISIONS` (None:
    float32; an alias such as "qint8" too), else an :class:`OnnxExportError` naming them."""
    try:
        name = check(value)
    except ValueError:
        name = ""
    if name not in EXPORT_PRECISIONS:
        raise OnnxExportError(
            f"precision={value!r}: an ONNX export computes in one of {list(EXPORT_PRECISIONS)}: give one of them "
            "(load the model itself for other precisions)"
        )
    return name


def _check_target(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise OnnxExportError(f"{out_dir} exists and is not an empty folder: remove it or export to another folder")


def export_onnx(
    model: Optional[PathLike],
    out_dir: PathLike,
    *,
    options: Optional[PathLike] = None,
    weights: Optional[PathLike] = None,
    tolerance: Optional[float] = None,
    sentences: Optional[list[list[str]]] = None,
    precision: PrecisionLike = None,
) -> OnnxExport:
    """Export ``model`` (what :func:`spacy_elmo.load_bilm` takes: ``"default"``, a folder, a published name, ...; or
    ``options`` and ``weights`` files) to the new folder ``out_dir``: ``token_encoder.onnx``, ``forward_lstm.onnx``,
    ``backward_lstm.onnx`` and ``manifest.json`` (and an ELMoForManyLangs model's ``char.dic`` and ``word.dic``), for
    :class:`~spacy_elmo.onnx.OnnxBiLM`.

    ``precision``: "float32" (None: the default, exact) or "int8" (the products' weights in int8, activations
    quantized on the fly: :mod:`spacy_elmo.onnx.quantize`; faster, approximate), recorded in the manifest.

    The graphs are checked first on ONNX Runtime against the torch float32 path over ``sentences`` (default
    :data:`CHECK_SENTENCES`), as one batch and each sentence alone: when a layer differs by more than ``tolerance``
    of its largest absolute value (None: :data:`TOLERANCE` for float32, :data:`~spacy_elmo.onnx.quantize.INT8_TOLERANCE`
    for int8), an :class:`OnnxExportError` says by how much and nothing is written.
    """
    out_dir = Path(out_dir)
    exported = export_precision(precision)
    _check_target(out_dir)  # before the model loads: said at once
    bound = tolerance if tolerance is not None else (INT8_TOLERANCE if exported == "int8" else TOLERANCE)
    try:
        ort = import_onnxruntime()
    except ImportError as err:
        raise OnnxExportError(str(err)) from None
    import torch

    from ..runtime.embedding.torch_runner import TorchRunner, load_model_files
    from ..sources.model_paths import fingerprint, resolve_model_files

    options_path, weights_path = resolve_model_files(model, options, weights)
    bilm = load_model_files(options_path, weights_path).float().eval()
    try:
        graphs, onnx_version = serialized_graphs(bilm)
        if exported == "int8":
            graphs = quantized_graphs(graphs)
    except (ImportError, ValueError) as err:  # no onnx, or a model the graphs cannot express: one line
        raise OnnxExportError(str(err)) from None
    vocabulary, dictionaries = _dictionaries(bilm)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **token_settings(bilm.options, vocabulary),
        "fingerprint": fingerprint(options_path, weights_path),
        "opset": OPSET,
        "n_layers": bilm.options.n_layers,
        "dim": bilm.options.output_dim,
        "written_by": {"spacy_elmo": __version__, "onnx": onnx_version, "torch": torch.__version__},
        "precision": exported,
    }
    check: list[Sequence[str]] = [list(s) for s in (sentences if sentences is not None else CHECK_SENTENCES) if len(s)]
    if not check:
        raise OnnxExportError("sentences: give at least one non-empty sentence to check the export on")
    try:
        folder_options = manifest_options(manifest, "the manifest")  # what a runner of the folder will read
    except WeightFileError as err:  # an architecture the manifest's options cannot hold (a filter past 50 chars)
        raise OnnxExportError(f"{err}: not exported") from None
    spelling = ELMO_CHARS if vocabulary is None else manylangs_spelling(vocabulary)
    runner = OnnxBiLM.from_graphs(graphs, manifest, folder_options, token_cache_size=0, spelling=spelling)
    reference = TorchRunner(bilm, torch.device("cpu"), token_cache_size=0).layers(check)  # the backend's torch path
    errors = [
        max(pair)
        for pair in zip(
            layer_errors(runner.layers(check), reference),
            layer_errors([runner.layers([s])[0] for s in check], reference),
        )
    ]
    worst = max(errors)
    logger.info(
        "ONNX export (%s) of %s: largest error %.3g of a layer's scale (per layer %s)", exported, model, worst, errors
    )
    if not worst <= bound:  # (NaN fails too)
        layer = errors.index(worst) if worst == worst else 0
        raise OnnxExportError(
            f"the {exported} ONNX graphs differ from the torch float32 path by {worst:.3g} of layer {layer}'s scale, "
            f"more than the {bound:g} allowed: not exported (a bug of the export; please report it with the model)"
        )
    manifest["verification"] = {
        "max_relative_error": worst,
        "sentences": len(check),
        "onnxruntime": ort.__version__,
        "tolerance": bound,
    }
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        for name, data in (
            *((name, graphs[role]) for role, name in GRAPH_FILES.items()),
            *dictionaries.items(),
        ):
            with reported_as(out_dir / name):
                (tmp / name).write_bytes(data)
        write_json_atomically(tmp / MANIFEST, manifest)
        _check_target(out_dir)  # (another writer may have filled it meanwhile)
        if out_dir.is_dir():
            os.rmdir(out_dir)  # an empty folder: replaced by the new one
    return OnnxExport(out_dir, worst, tuple(errors), manifest["fingerprint"], exported)


__all__ = [
    "CHECK_SENTENCES",
    "TOLERANCE",
    "OnnxExport",
    "OnnxExportError",
    "export_onnx",
    "export_precision",
    "layer_errors",
]
