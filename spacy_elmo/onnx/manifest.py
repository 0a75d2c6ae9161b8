"""An ONNX export folder's names and its ``manifest.json``: what was exported, from which model, how to spell tokens.

The folder holds :data:`TOKEN_ENCODER` and :data:`CONTEXTUALIZER` (:mod:`.graph`) and :data:`MANIFEST`, which
:func:`read_manifest` reads through the package's one schema check
(:func:`~spacy_elmo.groundwork.schema_check.read_json_file`): a missing, damaged or foreign manifest is one line naming
the file, the field and what to do. Torch-free (pydantic and numpy only), so that the runner can read it without torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args

from pydantic import Field, field_validator

from ..bilm import chars
from ..bilm.file_formats import Record, Text
from ..bilm.options import BiLMOptions
from ..bilm.weights import options_from_dict
from ..groundwork.file_names import PathLike
from ..groundwork.schema_check import FileSchemaError, read_json_file

# an export folder's files
MANIFEST = "manifest.json"
TOKEN_ENCODER = "token_encoder.onnx"
CONTEXTUALIZER = "contextualizer.onnx"

FORMAT = "spacy-elmo-onnx"
FORMAT_VERSION = 1  # raised when a reader of an older version could not read the folder

ADVICE = "export the model again (spacy-elmo export MODEL FOLDER --format onnx)"

# the precisions an export computes in (names of bilm/engine/precisions.py's rows): float32, or int8 weights in its
# products (``--precision int8``, :mod:`.quantize`); the first is a manifest's without the field (written before int8)
ExportPrecision = Literal["float32", "int8"]
EXPORT_PRECISIONS: tuple[str, ...] = get_args(ExportPrecision)

Width = Annotated[int, Field(ge=1, le=1_000_000)]
CharId = Annotated[int, Field(ge=0, le=1_000_000)]


class OnnxFolderError(FileSchemaError):
    """An ONNX export folder that cannot be used: a file missing, a manifest damaged or of another format."""


class CharacterSettings(Record):
    """How a token is spelled as char ids (:mod:`spacy_elmo.bilm.chars`): the reader checks it spells them alike."""

    max_chars_per_token: Width
    begin_of_sentence: CharId
    end_of_sentence: CharId
    begin_of_word: CharId
    end_of_word: CharId
    padding_char: CharId
    bos_token: Text
    eos_token: Text


class WrittenBy(Record):
    """The versions that wrote the folder (for a reader's bug report; not checked)."""

    spacy_elmo: Text
    onnx: Text
    torch: Text


class Verification(Record):
    """What the export measured: the largest error of ONNX Runtime's layers against the torch float32 path, each
    layer's error relative to that layer's largest absolute value, over ``sentences`` test sentences, and the bound
    it was held to (``tolerance``: float32's or int8's; absent in folders written before int8)."""

    max_relative_error: Annotated[float, Field(ge=0, le=1)]
    sentences: Annotated[int, Field(ge=1, le=1_000_000)]
    onnxruntime: Text
    tolerance: Optional[Annotated[float, Field(ge=0, le=1)]] = None


class OnnxManifest(Record):
    """``manifest.json`` of an export folder."""

    format: Literal["spacy-elmo-onnx"]
    format_version: Literal[1]
    options: dict[str, Any]
    characters: CharacterSettings
    fingerprint: Text
    opset: Annotated[int, Field(ge=1, le=1000)]
    n_layers: Width
    dim: Width
    written_by: WrittenBy
    verification: Verification
    precision: Optional[ExportPrecision] = None  # absent (or null) in folders written before int8: float32

    @field_validator("options")
    @classmethod
    def _valid_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        try:
            options_from_dict(options, "options")
        except ValueError as err:  # its message names the option at fault, after "options: " (said by the field)
            raise ValueError(str(err).removeprefix("options: ")) from None
        return options


FILE_SCHEMAS = {MANIFEST: OnnxManifest}  # the schema of each JSON file this module names


def character_settings() -> dict[str, Any]:
    """This package's char-id spelling (:mod:`spacy_elmo.bilm.chars`), as the manifest records it."""
    return {
        "max_chars_per_token": chars.MAX_CHARS_PER_TOKEN,
        "begin_of_sentence": chars.BEGIN_OF_SENTENCE,
        "end_of_sentence": chars.END_OF_SENTENCE,
        "begin_of_word": chars.BEGIN_OF_WORD,
        "end_of_word": chars.END_OF_WORD,
        "padding_char": chars.PADDING_CHAR,
        "bos_token": chars.BOS_TOKEN,
        "eos_token": chars.EOS_TOKEN,
    }


def read_manifest(folder: PathLike) -> tuple[dict[str, Any], BiLMOptions]:
    """The checked manifest of export folder ``folder`` and its biLM options; an :class:`OnnxFolderError` (one line)
    when the folder, a graph or the manifest is missing, the manifest damaged or foreign, or it spells characters
    otherwise than this package (the token encoder would then get other ids than it was exported for)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise OnnxFolderError(f"{folder}: no such folder (an ONNX export folder): {ADVICE}, or give its path")
    for name in (MANIFEST, TOKEN_ENCODER, CONTEXTUALIZER):
        if not (folder / name).is_file():
            raise OnnxFolderError(f"{folder}: no {name}, so not a whole ONNX export folder: {ADVICE}")
    manifest = read_json_file(folder / MANIFEST, OnnxManifest, ADVICE, OnnxFolderError)
    options = options_from_dict(manifest["options"], str(folder / MANIFEST))
    ours = character_settings()
    theirs = {key: manifest["characters"][key] for key in ours}  # (later versions may add keys)
    if theirs != ours:
        differ = ", ".join(f"{key} {theirs[key]!r} (here {ours[key]!r})" for key in ours if theirs[key] != ours[key])
        raise OnnxFolderError(
            f"{folder / MANIFEST}: characters: the folder spells tokens as char ids otherwise than this spacy_elmo "
            f"({differ}): {ADVICE} with this version"
        )
    if (manifest["n_layers"], manifest["dim"]) != (options.n_layers, options.output_dim):
        raise OnnxFolderError(
            f"{folder / MANIFEST}: n_layers/dim ({manifest['n_layers']}, {manifest['dim']}) disagree with its options "
            f"({options.n_layers}, {options.output_dim}): {ADVICE}"
        )
    return manifest, options


def exported_precision(manifest: dict[str, Any]) -> str:
    """The precision a checked manifest (:func:`read_manifest`'s) says its graphs compute in: a name of
    :data:`EXPORT_PRECISIONS` (float32 where the manifest predates the field)."""
    return str(manifest.get("precision") or EXPORT_PRECISIONS[0])


__all__ = [
    "CONTEXTUALIZER",
    "EXPORT_PRECISIONS",
    "FILE_SCHEMAS",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "TOKEN_ENCODER",
    "OnnxFolderError",
    "OnnxManifest",
    "character_settings",
    "exported_precision",
    "read_manifest",
]
