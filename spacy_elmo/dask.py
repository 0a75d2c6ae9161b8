"""ELMo on Dask collections: pooled vectors of a Bag or Series as a dask Array, token vectors as a dask Bag.

Needs the ``[dask]`` extra (``pip install -e '.[dask]'`` in a checkout). The task graph carries the model's *name or
path* and the options, never the weights: each worker process loads the model once through
:func:`spacy_elmo.load_bilm`'s process-wide cache (a published model is downloaded once per
machine, under a file lock in ``SPACY_ELMO_HOME``) and uses the embedding disk cache named by
its own ``SPACY_ELMO_CACHE_DIR`` or by ``cache_dir=``. Nothing here sets torch's thread count:
Dask's nanny starts each worker process with ``OMP_NUM_THREADS=1`` (its
``distributed.nanny.pre-spawn-environ`` setting), which torch reads at start-up. ``spacy-elmo embed
--scheduler`` (embedding files on a cluster) is :mod:`spacy_elmo.output.cluster`, and so is :func:`local_cluster`
(one definition for both, imported on first use: it needs ``distributed``, which the rest of this module does not).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from .about import install_extra
from .groundwork.lazy_exports import lazy_exports

try:  # absolute imports: this module's own name is "dask" too
    import dask
    import dask.array as da
    import dask.bag as db
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"spacy_elmo.dask needs Dask ({err}): {install_extra('dask')}") from err

from .bilm.engine.precisions import AUTO
from .groundwork.file_names import PathLike
from .runtime.configuration.validation import resolve_device
from .runtime.embedding.backend import ElmoBackend, load_bilm, onnx_export_folder, resolve_precision
from .runtime.features.front_settings import DASK_SETTINGS, DASK_TOKEN_SETTINGS, FrontSettings, given_settings
from .runtime.features.text_rows import pooled_matrix, sample_column, token_records
from .sources.model_paths import model_shape, resolve_model_files

if TYPE_CHECKING:  # pragma: no cover
    from .output.cluster import local_cluster

__all__ = ["embed_texts", "embed_tokens", "local_cluster"]

# local_cluster, defined in output/cluster.py, imported on first use (PEP 562)
__getattr__, __dir__ = lazy_exports(__name__, {"local_cluster": "spacy_elmo.output.cluster"}, globals())


def embed_texts(
    texts: Any,
    *,
    model: PathLike = "default",
    cache_dir: Optional[PathLike] = None,
    lengths: Union[bool, Sequence[int]] = True,
    **settings: Any,
) -> da.Array:
    """Pooled ELMo vectors of a dask Bag or dask DataFrame Series, as a float32 dask Array ``(n, features)``.

    Each row holds exactly what :class:`spacy_elmo.ElmoVectorizer` with the same parameters gives
    for that text (each partition goes through the vectorizer's computation, ``text_rows.pooled_matrix``; to
    float32 rounding, as another process may block its sums differently), in the input's order, one chunk of rows
    per input partition. ``texts`` holds strings or token lists. An input with no texts gives a
    ``(0, features)`` array.

    ``model`` and the settings ``layers``, ``pooling``, ``norm``, ``tokenizer``, ``batch_size``, ``device``,
    ``precision``, ``max_length``, ``window_overlap`` (keywords): as for ``ElmoVectorizer``, with its defaults
    (declared once in ``spacy_elmo.runtime.features.front_settings``; a callable tokenizer is pickled into the graph).
    ``cache_dir``: a disk cache directory each worker uses (the same path on every machine);
    ``None`` leaves each worker's own setting (``SPACY_ELMO_CACHE_DIR``).
    ``lengths``: ``True`` computes the partitions' lengths now (one pass over the input, running
    whatever produced it) so the array's chunks are known; ``False`` leaves them unknown (NaN,
    as ``dask.dataframe.Series.to_dask_array()`` does: call ``.compute_chunk_sizes()`` later);
    a sequence of ints gives them.

    The model is not loaded here: its files are found (a published model is downloaded) and the
    settings checked against the shape its options file gives (``model_paths.model_shape``).
    """
    model, checked = _client_settings(model, given_settings(settings, DASK_SETTINGS, "embed_texts"))
    features = _checked_width(model, checked)  # errors here, where the input enters, not in a worker
    partitions = _partitions(texts)
    sizes = _partition_lengths(texts, partitions, lengths)
    if not partitions or (sizes is not None and sum(sizes) == 0):
        return da.zeros((0, features), dtype=np.float32, chunks=((0,), (features,)))
    embedded = [dask.delayed(_pooled_partition, pure=True)(part, model, checked, cache_dir) for part in partitions]
    blocks = [
        da.from_delayed(block, shape=(np.nan if sizes is None else sizes[i], features), dtype=np.float32)
        for i, block in enumerate(embedded)
    ]
    return da.concatenate(blocks, axis=0, allow_unknown_chunksizes=True)


def embed_tokens(
    texts: Any,
    *,
    model: PathLike = "default",
    cache_dir: Optional[PathLike] = None,
    **settings: Any,
) -> db.Bag:
    """Token vectors of a dask Bag or dask DataFrame Series: a dask Bag of one record per text, in order.

    Each record is ``{"tokens": [str, ...], "vectors": float32 array (n_tokens, width)}``: the
    tokens ``ElmoVectorizer`` embeds (whitespace tokens dropped) and their mixed layers (the
    rows that ``pooling="mean"`` would average; ``layers="all"``: every layer side by side). A text with no tokens
    gives ``(0, width)``. The Bag has one partition per input partition; ``bag.pluck("vectors")`` gives the arrays
    alone. ``model``, ``cache_dir`` and the settings as for :func:`embed_texts`, but for ``pooling`` and ``norm``.
    """
    model, checked = _client_settings(model, given_settings(settings, DASK_TOKEN_SETTINGS, "embed_tokens"))
    _checked_width(model, checked)
    partitions = _partitions(texts)
    embedded = [dask.delayed(_token_partition, pure=True)(part, model, checked, cache_dir) for part in partitions]
    return db.from_delayed(embedded) if embedded else db.from_sequence([], npartitions=1)


# -- what runs on the workers ------------------------------------------------------------------


def _pooled_partition(
    texts: Any, model: PathLike, settings: FrontSettings, cache_dir: Optional[PathLike]
) -> np.ndarray:
    """One partition through the vectorizer's computation (the worker's shared backend)."""
    return pooled_matrix(sample_column(_as_list(texts)), _worker_backend(model, settings, cache_dir), settings)


def _token_partition(
    texts: Any, model: PathLike, settings: FrontSettings, cache_dir: Optional[PathLike]
) -> list[dict[str, Any]]:
    """One partition's token records: tokenized and windowed as ``ElmoVectorizer`` does (``text_rows``), mixed."""
    return token_records(sample_column(_as_list(texts)), _worker_backend(model, settings, cache_dir), settings)


def _worker_backend(model: PathLike, settings: FrontSettings, cache_dir: Optional[PathLike]) -> ElmoBackend:
    return load_bilm(model, device=settings.device, precision=settings.precision, cache_dir=cache_dir)


# -- on the client ------------------------------------------------------------------------------


def _client_settings(model: PathLike, settings: FrontSettings) -> tuple[PathLike, FrontSettings]:
    """The model as a plain string and the settings as the graph carries them: ``precision="auto"`` on a CPU chosen
    once, here (workers on other CPUs must not each pick their own; for a GPU, each worker resolves it where the GPU
    is); no progress bar in the partitions."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model={model!r}: expected 'default' or a path to an ELMo directory")
    model = os.fspath(model) if isinstance(model, os.PathLike) else model
    # (an ONNX export folder's "auto" is its own precision, the same on every worker: left to them)
    if settings.precision == AUTO and _on_cpu(settings.device) and onnx_export_folder(model, None, None) is None:
        settings = dataclasses.replace(settings, precision=resolve_precision(settings.precision, settings.device).name)
    # no bar of the vectorizer's per partition: Dask says its own progress (its dashboard, dask.diagnostics)
    return model, dataclasses.replace(settings, verbose=0)


def _checked_width(model: PathLike, settings: FrontSettings) -> int:
    """The width of one row (pooled, for ``embed_texts``) from the model's options file (the weights stay unread),
    every setting checked against it."""
    n_layers, dim = model_shape(*resolve_model_files(model))
    if _on_cpu(settings.device):  # a GPU is the workers': only its spelling was checked
        resolve_precision(
            settings.precision, resolve_device(settings.device)
        )  # what load_bilm would refuse, named here
    return settings.width(n_layers, dim)


def _on_cpu(device: Optional[str]) -> bool:
    """Whether ``device`` is the CPU (None too). Any other device is resolved by the worker that loads the model (a
    client without a GPU may send work to GPU workers); only its spelling is checked here."""
    import torch

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
