"""One shared, cached biLM backend: load a model once per process, embed token sequences in batches."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .bilm.chars import batch_to_char_ids
from .bilm.model import BiLM
from .bilm.weights import WeightFileError, load_model

PathLike = Union[str, os.PathLike]

DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "default"
DEFAULT_BATCH_SIZE = 64  # sentences per batch
DEFAULT_TOKEN_BUDGET = 4096  # padded tokens per batch (longest sentence x batch rows)
_WEIGHT_NAMES = ("weights.hdf5", "lm_weights.hdf5")


class ElmoBackend:
    """A loaded biLM on one device. Stateless: a sentence's vectors never depend on its batch.

    Get one with :func:`spacy_elmo.load_bilm`, which shares one object per model and device.
    """

    def __init__(self, model: BiLM, options_path: Path, weights_path: Path, device: torch.device) -> None:
        self.model = model.to(device).eval()
        self.options_path = options_path
        self.weights_path = weights_path
        self.device = device
        self.fingerprint = _fingerprint(options_path, weights_path)
        self.token_budget = DEFAULT_TOKEN_BUDGET

    @property
    def n_layers(self) -> int:
        """Number of biLSTM layers; ``embed`` returns ``n_layers + 1`` layers (0 = token layer)."""
        return self.model.n_layers

    @property
    def dim(self) -> int:
        """Width of every output layer, ``2 * projection_dim``."""
        return self.model.output_dim

    def __repr__(self) -> str:
        return f"ElmoBackend({str(self.weights_path)!r}, device={str(self.device)!r}, n_layers={self.n_layers}, dim={self.dim})"

    def __reduce__(self):  # pickles as a reference: the unpickled backend comes from the shared cache
        return (_load_from_paths, (str(self.options_path), str(self.weights_path), str(self.device)))

    def embed(self, sentences: Iterable[Sequence[str]], *, batch_size: Optional[int] = None) -> List[np.ndarray]:
        """ELMo activations for each sentence, float32 ``(n_layers + 1, n_tokens, dim)``, in input order.

        Sentences are sorted by length and batched under ``batch_size`` sentences and a padded
        token budget; an empty sentence gives ``(n_layers + 1, 0, dim)``.
        """
        sentences = validate_sentences(sentences)
        max_rows = DEFAULT_BATCH_SIZE if batch_size is None else int(batch_size)
        if max_rows < 1:
            raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
        results: List[Optional[np.ndarray]] = [None] * len(sentences)
        empty = np.zeros((self.n_layers + 1, 0, self.dim), dtype=np.float32)
        for i, tokens in enumerate(sentences):
            if not tokens:
                results[i] = empty.copy()
        for batch in length_batches([len(s) for s in sentences], max_rows, self.token_budget):
            for i, array in zip(batch, self._embed_batch([sentences[i] for i in batch])):
                results[i] = array
        return results  # type: ignore[return-value]

    def _embed_batch(self, batch: List[Sequence[str]]) -> List[np.ndarray]:
        char_ids = torch.as_tensor(batch_to_char_ids(batch), device=self.device)
        with torch.inference_mode():
            activations, _, _ = self.model(char_ids)
        activations = activations.float().cpu().numpy()
        return [np.ascontiguousarray(activations[:, row, : len(tokens)]) for row, tokens in enumerate(batch)]


def length_batches(lengths: Sequence[int], max_rows: int, token_budget: int) -> List[List[int]]:
    """Group indices of non-empty items, longest first, so that rows x longest <= budget (at least one row)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches: List[List[int]] = []
    current: List[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and (len(current) >= max_rows or (len(current) + 1) * longest > token_budget):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def validate_sentences(sentences: Iterable[Sequence[str]]) -> List[Sequence[str]]:
    """Materialise ``sentences`` as a list, raising ``TypeError`` that names the bad sentence/token."""
    if isinstance(sentences, (str, bytes)) or not _is_iterable(sentences):
        raise TypeError(f"sentences must be an iterable of token sequences, not {type(sentences).__name__}")
    checked: List[Sequence[str]] = []
    for i, sentence in enumerate(sentences):
        if isinstance(sentence, (str, bytes)) or not _is_iterable(sentence):
            raise TypeError(
                f"sentence {i} is a {type(sentence).__name__}, not a sequence of token strings "
                f"(tokenize text first, e.g. text.split())"
            )
        tokens = list(sentence)
        for j, token in enumerate(tokens):
            if not isinstance(token, str):
                raise TypeError(f"sentence {i}, token {j}: expected str, got {type(token).__name__} ({token!r})")
        checked.append(tokens)
    return checked


def _is_iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def _fingerprint(options_path: Path, weights_path: Path) -> str:
    """sha256 of the canonical options and the weight file's bytes: equal files, equal fingerprint."""
    digest = hashlib.sha256()
    options = json.loads(options_path.read_text(encoding="utf-8"))
    digest.update(json.dumps(options, sort_keys=True).encode("utf-8"))
    with open(weights_path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:32]


# -- the process-wide cache ---------------------------------------------------------------

_CACHE: Dict[Tuple, ElmoBackend] = {}
_CACHE_LOCK = threading.Lock()


def resolve_model_files(
    model: Optional[PathLike] = "default", options: Optional[PathLike] = None, weights: Optional[PathLike] = None
) -> Tuple[Path, Path]:
    """The (options.json, weights.hdf5) pair that ``model`` / ``options`` / ``weights`` name."""
    if options is not None or weights is not None:
        if options is None or weights is None:
            raise ValueError("give both options= and weights= (or a model directory)")
        return Path(options).resolve(), Path(weights).resolve()
    if model is None or str(model) == "default":
        directory = DEFAULT_MODEL_DIR
        if not (directory / "options.json").is_file():
            raise WeightFileError(
                "the bundled default ELMo model is not part of this installation; "
                "pass a directory holding options.json and a weights .hdf5 file"
            )
    else:
        directory = Path(model).expanduser()
    if not directory.is_dir():
        raise WeightFileError(f"ELMo model directory not found: {directory}")
    options_path = directory / "options.json"
    if not options_path.is_file():
        raise WeightFileError(f"ELMo model directory {directory} has no options.json")
    return options_path.resolve(), _find_weights(directory).resolve()


def _find_weights(directory: Path) -> Path:
    for name in _WEIGHT_NAMES:
        if (directory / name).is_file():
            return directory / name
    found = sorted(p for p in directory.glob("*.hdf5") if p.is_file())
    if len(found) == 1:
        return found[0]
    if not found:
        raise WeightFileError(f"ELMo model directory {directory} has no .hdf5 weight file")
    names = ", ".join(p.name for p in found)
    raise WeightFileError(f"ELMo model directory {directory} has several .hdf5 files ({names}); name one with weights=")


def resolve_device(device: Union[None, str, torch.device] = None) -> torch.device:
    """``None`` means CPU; a CUDA device that is not available is an error, not a silent fallback."""
    resolved = torch.device("cpu" if device is None else device)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={str(device)!r} requested but CUDA is not available")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def load_bilm(
    model: Optional[PathLike] = "default",
    *,
    options: Optional[PathLike] = None,
    weights: Optional[PathLike] = None,
    device: Union[None, str, torch.device] = None,
) -> ElmoBackend:
    """Load (once per process) the ELMo model in ``model`` (a directory or ``"default"``).

    The same resolved files and device always give the same :class:`ElmoBackend` object, so
    every spaCy component and scikit-learn transformer shares one model in memory.
    """
    options_path, weights_path = resolve_model_files(model, options, weights)
    torch_device = resolve_device(device)
    if not weights_path.is_file():
        raise WeightFileError(f"weight file not found: {weights_path}")
    stat = weights_path.stat()
    key = (str(options_path), str(weights_path), stat.st_size, stat.st_mtime_ns, str(torch_device))
    with _CACHE_LOCK:
        backend = _CACHE.get(key)
        if backend is None:
            backend = ElmoBackend(load_model(options_path, weights_path), options_path, weights_path, torch_device)
            _CACHE[key] = backend
        return backend


def _load_from_paths(options: str, weights: str, device: str) -> ElmoBackend:
    return load_bilm(options=options, weights=weights, device=device)
