"""AllenNLP's embedding-file layout, written in one place for ``spacy-elmo embed`` and AllenNLP's ``embed_file``.

One dataset per input line, named by its 0-based line number (or by the sentence itself with
``use_sentence_keys``), holding what :func:`select_layers` keeps of the line's
``(n_layers + 1, n_tokens, dim)`` layers for the output format (:data:`OUTPUT_FORMATS`: ``"all"``,
the ``"top"`` layer or their ``"average"``), float32; and, unless ``forget_sentences`` or
``use_sentence_keys``, a ``sentence_to_index`` dataset: one string, the JSON object from each
sentence to its key (the last line for a repeated sentence). :class:`LineDatasets` writes it into
an open HDF5 file (:func:`~spacy_elmo.output.embed_file.hdf5_output`'s), line by line.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

OUTPUT_FORMATS = ("all", "top", "average")
SENTENCE_TO_INDEX = "sentence_to_index"  # the dataset holding the sentence -> key map


class DuplicateSentenceError(ValueError):
    """With ``use_sentence_keys``, a sentence that an earlier line already holds (it would need the same dataset)."""


def check_output_format(output_format: str) -> None:
    """``ValueError`` unless ``output_format`` is one of :data:`OUTPUT_FORMATS`."""
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, not {output_format!r}")


def select_layers(layers: np.ndarray, output_format: str) -> np.ndarray:
    """What an embedding file stores of a sentence's ``(n_layers + 1, n_tokens, dim)`` layers for ``output_format``
    (one of :data:`OUTPUT_FORMATS`): all of them, the top one, or their mean (summed in float64, as AllenNLP's
    ``np.average``), as float32."""
    if output_format == "top":
        chosen = layers[-1]
    elif output_format == "average":
        chosen = layers.mean(axis=0, dtype=np.float64)
    else:
        chosen = layers
    return np.asarray(chosen, dtype=np.float32)


class LineDatasets:
    """The layout of the module docstring, written into ``out`` (an open ``h5py.File`` or the guarded file of
    ``hdf5_output``): :meth:`add` each line, then :meth:`finish` once for the ``sentence_to_index`` dataset.

    ``source`` names the input in error messages. ``check_keys``: a sentence key HDF5 cannot name as
    given (empty, ``.``, ``sentence_to_index``, a ``/`` or a NUL, which HDF5 would cut short) is a
    ``ValueError`` naming the line; AllenNLP's ``embed_file`` does not check (``False``: such a key makes
    groups or fails in h5py, as there). ``ascii_index``: the map's JSON with non-ASCII characters
    escaped (AllenNLP's ``json.dumps``) rather than as UTF-8 text; both read back the same.
    """

    def __init__(
        self,
        out: Any,
        output_format: str,
        source: str,
        *,
        use_sentence_keys: bool = False,
        forget_sentences: bool = False,
        check_keys: bool = True,
        ascii_index: bool = False,
    ) -> None:
        check_output_format(output_format)
        self.out = out
        self.output_format = output_format
        self.source = source
        self.use_sentence_keys = use_sentence_keys
        self.keeps_index = not forget_sentences and not use_sentence_keys
        self.check_keys = check_keys
        self.ascii_index = ascii_index
        self._index: dict[str, str] = {}  # sentence -> key, for sentence_to_index
        self._first_line: dict[str, int] = {}  # with use_sentence_keys: the line where each key was first seen

    def add(self, number: int, text: str, layers: np.ndarray) -> str:
        """Write line ``number`` (0-based) holding ``text``: its dataset of ``layers``; returns the dataset's key.

        A repeated sentence with ``use_sentence_keys`` raises :class:`DuplicateSentenceError` before anything
        of that line is written.
        """
        key = text if self.use_sentence_keys else str(number)
        if self.use_sentence_keys:
            if key in self._first_line:
                raise DuplicateSentenceError(
                    f"{self.source}: lines {self._first_line[key] + 1} and {number + 1} hold the same sentence; "
                    "drop --use-sentence-keys to key the vectors by line number"
                )
            self._first_line[key] = number
        if self.check_keys and (key in ("", ".", SENTENCE_TO_INDEX) or "/" in key or "\0" in key):
            raise ValueError(
                f"{self.source}, line {number + 1}: {key!r} cannot be an HDF5 dataset name; "
                "drop --use-sentence-keys to key the vectors by line number"
            )
        self.out.create_dataset(key, data=select_layers(layers, self.output_format))
        if self.keeps_index:
            self._index[text] = key
        return key

    def finish(self) -> None:
        """Write the ``sentence_to_index`` dataset (unless ``forget_sentences`` or ``use_sentence_keys``)."""
        if not self.keeps_index:
            return
        import h5py

        index = self.out.create_dataset(SENTENCE_TO_INDEX, (1,), dtype=h5py.string_dtype())
        index[0] = json.dumps(self._index, ensure_ascii=self.ascii_index)
