"""An ONNX export folder's names and its ``manifest.json``: what was exported, from which model, how to spell tokens.

The folder holds the graphs of :data:`GRAPH_FILES` (:mod:`.graph`: the token encoder and one LSTM stack per direction)
and :data:`MANIFEST` (and, when its ``tokens`` are ``"manylangs"``, the ELMoForManyLangs model's dictionaries:
:mod:`.token_spelling`), which
:func:`read_manifest` reads through the package's one schema check
(:func:`~spacy_elmo.groundwork.schema_check.read_json_file`): a missing, damaged or foreign manifest is one line naming
the file, the field and what to do. Torch-free (pydantic and numpy only), so that the runner can read it without torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, get_args

from pydantic import Field, field_validator, model_validator

from ..bilm import chars
from ..bilm.file_formats import Record, Text
from ..bilm.manylangs_files import CHAR_DIC, WORD_DIC
from ..bilm.manylangs_tokens import MAX_CHARACTERS_PER_TOKEN
from ..bilm.options import BiLMOptions
from ..bilm.weights import options_from_dict
from ..groundwork.file_names import PathLike
from ..groundwork.schema_check import FileSchemaError, read_json_file
from .graph import DIRECTIONS, TOKEN_ENCODER_ROLE

if TYPE_CHECKING:  # pragma: no cover
    from ..bilm.manylangs_tokens import ManyLangsVocabulary

# an export folder's files: the manifest and a graph per role (:mod:`.graph`'s roles)
MANIFEST = "manifest.json"
TOKEN_ENCODER = "token_encoder.onnx"
GRAPH_FILES = {TOKEN_ENCODER_ROLE: TOKEN_ENCODER, **{direction: f"{direction}_lstm.onnx" for direction in DIRECTIONS}}
DICTIONARIES = (CHAR_DIC, WORD_DIC)  # an ELMoForManyLangs export's (tokens "manylangs"; word.dic not when char-only)

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


class ManyLangsTokens(Record):
    """How an ELMoForManyLangs export spells tokens (:class:`~spacy_elmo.bilm.manylangs_tokens.ManyLangsVocabulary`):
    the folder's ``char.dic`` (``n_characters`` entries) and, when ``n_words`` > 0, ``word.dic``; tokens of
    ``max_chars`` characters with their markers. These stand for options' ``char_cnn.n_characters`` and
    ``max_characters_per_token`` (left out of ``options``, whose bounds are ELMo's char ids')."""

    max_chars: Annotated[int, Field(ge=3, le=MAX_CHARACTERS_PER_TOKEN)]
    n_characters: Width
    n_words: Annotated[int, Field(ge=0, le=1_000_000_000)]  # 0: a char-only model, no word.dic


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
    tokens: Literal["elmo-chars", "manylangs"] = "elmo-chars"  # how tokens are spelled: the section below that says
    characters: Optional[CharacterSettings] = None  # "elmo-chars"
    manylangs: Optional[ManyLangsTokens] = None  # "manylangs"
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

    @model_validator(mode="after")
    def _token_settings(self) -> OnnxManifest:
        section = "characters" if self.tokens == "elmo-chars" else "manylangs"
        if getattr(self, section) is None:
            raise ValueError(f"{section}: missing (a required key, how tokens {self.tokens!r} are spelled)")
        return self


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


# options' entries that an ELMoForManyLangs export's ``manylangs`` section holds instead
MANYLANGS_OPTIONS = {"n_characters": "n_characters", "max_characters_per_token": "max_chars"}


def token_settings(options: BiLMOptions, vocabulary: Optional[ManyLangsVocabulary]) -> dict[str, Any]:
    """The manifest's ``options`` and the fields that say how the folder spells tokens: ELMo's char ids
    (``vocabulary`` None), or an ELMoForManyLangs vocabulary's (its char table and token length in ``manylangs``)."""
    raw = options.to_json()
    if vocabulary is None:
        return {"options": raw, "tokens": "elmo-chars", "characters": character_settings()}
    for key in MANYLANGS_OPTIONS:
        raw["char_cnn"].pop(key, None)
    sizes = {"n_characters": len(vocabulary.chars), "n_words": len(vocabulary.words or ())}
    return {"options": raw, "tokens": "manylangs", "manylangs": {"max_chars": vocabulary.max_chars, **sizes}}


def manifest_options(manifest: dict[str, Any], source: str) -> BiLMOptions:
    """The biLM options of a checked manifest (:func:`token_settings`' inverse); a ``WeightFileError`` naming
    ``source`` for options this package cannot run."""
    options = options_from_dict(manifest["options"], source)
    if manifest.get("tokens") != "manylangs":
        return options
    return dataclasses.replace(options, **{field: manifest["manylangs"][field] for field in MANYLANGS_OPTIONS.values()})


def read_manifest(folder: PathLike) -> tuple[dict[str, Any], BiLMOptions]:
    """The checked manifest of export folder ``folder`` and its biLM options; an :class:`OnnxFolderError` (one line)
    when the folder, a graph or the manifest is missing, the manifest damaged or foreign, or it spells characters
    otherwise than this package (the token encoder would then get other ids than it was exported for)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise OnnxFolderError(f"{folder}: no such folder (an ONNX export folder): {ADVICE}, or give its path")
    for name in (MANIFEST, *GRAPH_FILES.values()):
        if not (folder / name).is_file():
            raise OnnxFolderError(f"{folder}: no {name}, so not a whole ONNX export folder: {ADVICE}")
    manifest = read_json_file(folder / MANIFEST, OnnxManifest, ADVICE, OnnxFolderError)
    options = manifest_options(manifest, str(folder / MANIFEST))
    ours = character_settings()
    theirs = ours if manifest.get("tokens") == "manylangs" else {key: manifest["characters"][key] for key in ours}
    if theirs != ours:  # (a later version may add keys)
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
    "DICTIONARIES",
    "EXPORT_PRECISIONS",
    "FILE_SCHEMAS",
    "FORMAT",
    "FORMAT_VERSION",
    "GRAPH_FILES",
    "MANIFEST",
    "TOKEN_ENCODER",
    "OnnxFolderError",
    "OnnxManifest",
    "character_settings",
    "exported_precision",
    "manifest_options",
    "read_manifest",
    "token_settings",
]
