"""How an ELMoForManyLangs model spells tokens as id rows, without torch: its dictionaries and vocabulary.

The one home of the id rows (:meth:`ManyLangsVocabulary.token_ids`): the torch token encoder
(:class:`~.manylangs.ManyLangsTokenEncoder`) and the ONNX runner (:mod:`spacy_elmo.onnx`, which imports no torch)
both spell tokens through it, and read the ``.dic`` files through :func:`read_lexicon`. The rules are the module
docstring's of :mod:`.manylangs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from .manylangs_files import CHAR_DIC, WORD_DIC
from .weights import WeightFileError

BOS = "<bos>"  # the sentence markers, as words and as char-dictionary entries
EOS = "<eos>"
OOV = "<oov>"
PAD = "<pad>"
BOW = "<bow>"
EOW = "<eow>"
# The longest token row (characters and markers) an architecture may ask for: every token is padded to it at
# each call, so 10**9 would try to allocate gigabytes per token; the published models use 50.
MAX_CHARACTERS_PER_TOKEN = 256
CHAR_ENTRIES = (BOS, EOS, OOV, PAD, BOW, EOW)  # what a char dictionary must hold
WORD_ENTRIES = (OOV, PAD)  # what a word dictionary must hold


def parse_lexicon(text: str, source: str, required: tuple[str, ...]) -> dict[str, int]:
    """A ``.dic`` file's ``text`` read as ELMoForManyLangs reads it: each line stripped, split at tabs; a lone id is
    ``"\\u3000"``.

    Later lines win over earlier ones with the same token. Every id must be a row of the embedding (``0 <= id <
    number of entries``) and the ``required`` entries must be there; else a :class:`WeightFileError` naming
    ``source`` (the dictionary's path).
    """
    lexicon: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):  # the line breaks Python's text readers split at
        fields = line.strip().split("\t")
        if len(fields) == 1:
            fields.insert(0, "\u3000")  # its writer's "\u3000<TAB>id", stripped of the ideographic space
        if len(fields) != 2 or not fields[1].isdecimal():  # isdigit() takes "²", which int() refuses
            raise WeightFileError(f"dictionary {source}, line {number}: expected 'token<TAB>id', not {line!r}")
        lexicon[fields[0]] = int(fields[1])
    for name in required:
        if name not in lexicon:
            raise WeightFileError(
                f"dictionary {source} has no {name!r} entry (ELMoForManyLangs needs {', '.join(required)})"
            )
    bad = [(token, i) for token, i in lexicon.items() if i >= len(lexicon)]
    if bad:
        raise WeightFileError(
            f"dictionary {source}: {bad[0][0]!r} has id {bad[0][1]}, beyond its {len(lexicon)} entries"
        )
    return lexicon


def read_lexicon(path: Path, required: tuple[str, ...]) -> dict[str, int]:
    """The ``.dic`` file ``path`` (:func:`parse_lexicon`); a :class:`WeightFileError` when it is missing or not
    UTF-8."""
    if not path.is_file():
        raise WeightFileError(f"dictionary not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise WeightFileError(f"dictionary {path} is not UTF-8 text: {err}") from err
    return parse_lexicon(text, str(path), required)


def lexicon_text(lexicon: dict[str, int]) -> str:
    """``lexicon`` as a ``.dic`` file's text, one ``token<TAB>id`` line per entry in id order. What
    :func:`parse_lexicon` read comes back the same; a token it could not have read (a line break, a tab, leading
    spaces) would not: a writer compares the two."""
    return "".join(f"{token}\t{index}\n" for token, index in sorted(lexicon.items(), key=lambda item: item[1]))


@dataclass(frozen=True, eq=False)
class ManyLangsVocabulary:
    """An ELMoForManyLangs model's dictionaries (token -> row; ``words`` None for a char-only model) and its token
    length: what makes id rows of tokens."""

    chars: dict[str, int]
    words: Optional[dict[str, int]]
    max_chars: int

    bos_token: ClassVar[str] = BOS  # the sentence markers put around each sentence
    eos_token: ClassVar[str] = EOS

    @classmethod
    def read(cls, folder: Path, max_chars: int, words: bool) -> ManyLangsVocabulary:
        """The dictionaries of ``folder`` (``char.dic``, and ``word.dic`` when ``words``), each checked by
        :func:`read_lexicon` (a :class:`WeightFileError` naming the file)."""
        chars = read_lexicon(folder / CHAR_DIC, CHAR_ENTRIES)
        return cls(chars, read_lexicon(folder / WORD_DIC, WORD_ENTRIES) if words else None, max_chars)

    @property
    def word_columns(self) -> int:
        """Columns of word ids before the char ids: 1 for a model with word vectors, 0 for a char-only one."""
        return 0 if self.words is None else 1

    @property
    def columns(self) -> int:
        """The width of an id row: the word column (if any) and ``max_chars`` char ids."""
        return self.word_columns + self.max_chars

    @property
    def special(self) -> dict[str, int]:
        """The char ids of the dictionary's special entries (:data:`CHAR_ENTRIES`)."""
        return {name: self.chars[name] for name in CHAR_ENTRIES}

    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """``(len(tokens), columns)`` int64: [word id,] char ids, each +1 (0 = no token).

        A token is cut to ``max_chars - 2`` characters (for the word lookup too); its char row is ``[B, chars...,
        E, <pad>...]`` with ``B``/``E`` the ``<eow>``/``<bow>`` ids (ELMoForManyLangs' batching code swaps the two
        names, and its models learnt them so); ``<bos>``/``<eos>`` are ``[B, <bos>|<eos>, E, <pad>...]``.
        """
        special, max_chars, columns = self.special, self.max_chars, self.word_columns
        begin, end, oov = special[EOW], special[BOW], special[OOV]
        ids = np.full((len(tokens), columns + max_chars), special[PAD], dtype=np.int64)
        words = self.words
        word_oov = -1 if words is None else words[OOV]
        for row, token in enumerate(tokens):
            if len(token) + 2 > max_chars:
                token = token[: max_chars - 2]
            if words is not None:
                ids[row, 0] = words.get(token, word_oov)
            chars = [special[token]] if token in (BOS, EOS) else [self.chars.get(c, oov) for c in token]
            ids[row, columns] = begin
            ids[row, columns + 1 : columns + 1 + len(chars)] = chars
            ids[row, columns + 1 + len(chars)] = end
        return ids + 1


__all__ = [
    "BOS",
    "BOW",
    "CHAR_ENTRIES",
    "EOS",
    "EOW",
    "MAX_CHARACTERS_PER_TOKEN",
    "OOV",
    "PAD",
    "WORD_ENTRIES",
    "ManyLangsVocabulary",
    "lexicon_text",
    "parse_lexicon",
    "read_lexicon",
]
