"""ELMo on Dask collections: pooled vectors of a Bag or Series as a dask Array, token vectors as a dask Bag.

Needs the ``[dask]`` extra (``pip install -e '.[dask]'`` in a checkout). The task graph carries the model's *name or
path* and the options, never the weights: each worker process loads the model once through
:func:`spacy_elmo.load_bilm`'s process-wide cache (a published model is downloaded once per
machine, under a file lock in ``SPACY_ELMO_HOME``) and uses the embedding disk cache named by
its own ``SPACY_ELMO_CACHE_DIR`` or by ``cache_dir=``. Nothing here sets torch's thread count:
Dask's nanny starts each worker process with ``OMP_NUM_THREADS=1`` (its
``distributed.nanny.pre-spawn-environ`` setting), which torch reads at start-up. ``spacy-elmo embed
--scheduler`` (embedding files on a cluster) is :mod:`spacy_elmo.output.cluster`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional, Union

import numpy as np
import torch

from .about import install_extra

try:  # absolute imports: this module's own name is "dask" too
    import dask
    import dask.array as da
    import dask.bag as db
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"spacy_elmo.dask needs Dask ({err}): {install_extra('dask')}") from err

from .bilm.files import PathLike
from .runtime.backend import AUTO, ElmoBackend, dtype_name, load_bilm, resolve_dtype
from .runtime.mix import LayerSpec, mix_layers
from .runtime.pooling import pooled_dim
from .runtime.settings import DEFAULT_LAYERS, DEFAULT_MAX_LENGTH, DEFAULT_OVERLAP
from .runtime.text_rows import DOC, Tokens, embedded_rows, row_tokens, sample_kind, token_rows
from .runtime.tokenize import TokenizerSpec
from .runtime.validation import optional_windows, resolve_device
from .sklearn import ElmoVectorizer
from .sources.model_files import model_shape, resolve_model_files

__all__ = ["embed_texts", "embed_tokens", "local_cluster"]


@contextmanager
def local_cluster(n_workers: int = 2, **cluster_options: Any) -> Iterator[Any]:
    """A ``distributed.Client`` on a LocalCluster of ``n_workers`` worker processes here, closed cleanly on exit.

    Each worker runs one thread (``cluster_options`` go to ``LocalCluster``). On exit the client closes, then each
    worker process is given time to exit before the cluster closes: plain ``LocalCluster.close`` kills a worker that
    takes more than 4 s to exit, with a warning per worker, and a worker that has imported torch can take that
    long on a busy machine. ``spacy-elmo embed --scheduler local:N`` starts and closes its cluster the same way
    (:func:`spacy_elmo.output.cluster.local_cluster`).
    """
    from .output.cluster import local_cluster as start  # needs distributed, which the rest of this module does not

    with start(n_workers, **cluster_options) as client:
        yield client


def embed_texts(
    texts: Any,
    *,
    model: PathLike = "default",
    layers: LayerSpec = DEFAULT_LAYERS,
    pooling: str = "mean",
    tokenizer: TokenizerSpec = None,
    batch_size: Optional[int] = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    max_length: Optional[int] = DEFAULT_MAX_LENGTH,
    window_overlap: int = DEFAULT_OVERLAP,
    cache_dir: Optional[PathLike] = None,
    lengths: Union[bool, Sequence[int]] = True,
) -> da.Array:
    """Pooled ELMo vectors of a dask Bag or dask DataFrame Series, as a float32 dask Array ``(n, features)``.

    Each row holds exactly what :class:`spacy_elmo.ElmoVectorizer` with the same parameters gives
    for that text (each partition goes through its ``transform``; to float32 rounding, as
    another process may block its sums differently), in the input's order, one chunk of rows
    per input partition. ``texts`` holds strings or token lists. An input with no texts gives a
    ``(0, features)`` array.

    ``model``, ``layers``, ``pooling``, ``tokenizer``, ``batch_size``, ``device``, ``dtype``,
    ``max_length``, ``window_overlap``: as for ``ElmoVectorizer`` (a callable tokenizer is pickled into the graph).
    ``cache_dir``: a disk cache directory each worker uses (the same path on every machine);
    ``None`` leaves each worker's own setting (``SPACY_ELMO_CACHE_DIR``).
    ``lengths``: ``True`` computes the partitions' lengths now (one pass over the input, running
    whatever produced it) so the array's chunks are known; ``False`` leaves them unknown (NaN,
    as ``dask.dataframe.Series.to_dask_array()`` does: call ``.compute_chunk_sizes()`` later);
    a sequence of ints gives them.

    The model is not loaded here: its files are found (a published model is downloaded) and the
    parameters checked against the shape its options file gives (``model_files.model_shape``).
    """
    params = _vectorizer_params(
        model, layers, pooling, tokenizer, batch_size, device, dtype, max_length, window_overlap
    )
    features = pooled_dim(_checked_dim(params), pooling)  # errors here, where the input enters, not in a worker
    partitions = _partitions(texts)
    sizes = _partition_lengths(texts, partitions, lengths)
    if not partitions or (sizes is not None and sum(sizes) == 0):
        return da.zeros((0, features), dtype=np.float32, chunks=((0,), (features,)))
    embedded = [dask.delayed(_pooled_partition, pure=True)(part, params, cache_dir) for part in partitions]
    blocks = [
        da.from_delayed(block, shape=(np.nan if sizes is None else sizes[i], features), dtype=np.float32)
        for i, block in enumerate(embedded)
    ]
    return da.concatenate(blocks, axis=0, allow_unknown_chunksizes=True)


def embed_tokens(
    texts: Any,
    *,
    model: PathLike = "default",
    layers: LayerSpec = DEFAULT_LAYERS,
    tokenizer: TokenizerSpec = None,
    batch_size: Optional[int] = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    max_length: Optional[int] = DEFAULT_MAX_LENGTH,
    window_overlap: int = DEFAULT_OVERLAP,
    cache_dir: Optional[PathLike] = None,
) -> db.Bag:
    """Token vectors of a dask Bag or dask DataFrame Series: a dask Bag of one record per text, in order.

    Each record is ``{"tokens": [str, ...], "vectors": float32 array (n_tokens, dim)}``: the
    tokens ``ElmoVectorizer`` embeds (whitespace tokens dropped) and their mixed layers (the
    rows that ``pooling="mean"`` would average). A text with no tokens gives ``(0, dim)``.
    The Bag has one partition per input partition; ``bag.pluck("vectors")`` gives the arrays
    alone. Parameters as for :func:`embed_texts`.
    """
    params = _vectorizer_params(model, layers, "mean", tokenizer, batch_size, device, dtype, max_length, window_overlap)
    _checked_dim(params)
    partitions = _partitions(texts)
    embedded = [dask.delayed(_token_partition, pure=True)(part, params, cache_dir) for part in partitions]
    return db.from_delayed(embedded) if embedded else db.from_sequence([], npartitions=1)


# -- what runs on the workers ------------------------------------------------------------------


def _pooled_partition(texts: Any, params: dict[str, Any], cache_dir: Optional[PathLike]) -> np.ndarray:
    """One partition through ``ElmoVectorizer.transform`` (the worker's shared backend)."""
    _worker_backend(params, cache_dir)
    return ElmoVectorizer(**params).transform(_as_list(texts))


def _token_partition(texts: Any, params: dict[str, Any], cache_dir: Optional[PathLike]) -> list[dict[str, Any]]:
    """One partition's token records: tokenized and windowed as ``ElmoVectorizer`` does (``text_rows``), mixed."""
    backend = _worker_backend(params, cache_dir)
    samples = _as_list(texts)
    kind = sample_kind(samples)
    if kind == DOC:
        raise TypeError("embed_tokens takes strings or token lists, not spaCy Docs")
    rows = token_rows(samples, kind, params["tokenizer"])
    windows = optional_windows(params["max_length"], params["window_overlap"])
    vectors: dict[Tokens, np.ndarray] = {(): np.zeros((0, backend.dim), dtype=np.float32)}
    embedded = embedded_rows(rows, backend, max_length=windows[0], overlap=windows[1], batch_size=params["batch_size"])
    for tokens, layers in embedded:
        vectors[tokens] = np.ascontiguousarray(mix_layers(layers, params["layers"]), dtype=np.float32)
    return [{"tokens": list(tokens), "vectors": vectors[tokens].copy()} for tokens in row_tokens(rows, len(samples))]


def _worker_backend(params: dict[str, Any], cache_dir: Optional[PathLike]) -> ElmoBackend:
    return load_bilm(params["model"], device=params["device"], dtype=params["dtype"], cache_dir=cache_dir)


# -- on the client ------------------------------------------------------------------------------


def _vectorizer_params(
    model: PathLike,
    layers: LayerSpec,
    pooling: str,
    tokenizer: TokenizerSpec,
    batch_size: Optional[int],
    device: Optional[str],
    dtype: Optional[str],
    max_length: Optional[int],
    window_overlap: int,
) -> dict[str, Any]:
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    if dtype == AUTO and _on_cpu(device):  # chosen once, here: workers on other CPUs must not each pick their own
        dtype = dtype_name(resolve_dtype(dtype, device))  # (for a GPU, each worker resolves it where the GPU is)
    return dict(
        model=model,
        layers=layers,
        pooling=pooling,
        tokenizer=tokenizer,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        max_length=max_length,
        window_overlap=window_overlap,
    )


def _checked_dim(params: dict[str, Any]) -> int:
    """The model's output width from its options file (the weights stay unread), every parameter checked against it."""
    n_layers, dim = model_shape(*resolve_model_files(params["model"]))
    on_client = params if _on_cpu(params["device"]) else {**params, "device": None}  # the GPU is the workers'
    ElmoVectorizer(**on_client).check_settings(n_layers)
    return dim


def _on_cpu(device: Optional[str]) -> bool:
    """Whether ``device`` is the CPU (None too). Any other device is resolved by the worker that loads the model (a
    client without a GPU may send work to GPU workers); only its spelling is checked here."""
    try:
        return torch.device("cpu" if device is None else device).type == "cpu"
    except (RuntimeError, TypeError):
        resolve_device(device)  # raises the one error that names a device torch does not know
        raise


def _partitions(texts: Any) -> list[Any]:
    """The input's partitions as Delayed objects; ``TypeError`` for anything but a Bag or a Series."""
    import dask.dataframe as dd

    if isinstance(texts, db.Bag):
        return list(texts.to_delayed())
    if isinstance(texts, dd.Series):
        return list(texts.to_delayed())
    if isinstance(texts, dd.DataFrame):
        raise TypeError("texts is a dask DataFrame: pass its text column, e.g. df['text']")
    raise TypeError(
        f"texts must be a dask Bag or a dask DataFrame Series of strings or token lists, not {type(texts).__name__} "
        "(for an in-memory list use ElmoVectorizer, or dask.bag.from_sequence(texts))"
    )


def _partition_lengths(texts: Any, partitions: list[Any], lengths: Union[bool, Sequence[int]]) -> Optional[list[int]]:
    if lengths is False:
        return None
    if lengths is True:
        return [int(n) for n in dask.compute(*[dask.delayed(len)(part) for part in partitions])]
    given = [int(n) for n in lengths]
    if len(given) != len(partitions):
        raise ValueError(f"lengths: {len(given)} given for {len(partitions)} partitions")
    return given


def _as_list(texts: Any) -> list[Any]:
    return list(texts)
