"""BiLMOptions: a biLM's architecture, in the vocabulary of ELMo's ``options.json``.

A plain value without torch, so that an architecture can be read and checked (``weights.options_from_dict``: the
schema and the size bounds) before torch is imported: ``spacy-elmo train --arch FILE`` says a bad or absurdly
large architecture at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class BiLMOptions:
    """The architecture, in the vocabulary of ELMo's ``options.json``."""

    filters: tuple[tuple[int, int], ...]
    char_embed_dim: int
    n_characters: int
    max_chars: int
    n_highway: int
    activation: str
    cell_dim: int
    projection_dim: int
    n_layers: int
    cell_clip: Optional[float]
    proj_clip: Optional[float]
    use_skip_connections: bool
    # the width of each output layer, both directions' projections side by side: derived once, as a value (it is
    # read on every embedding call: ElmoBackend.dim)
    output_dim: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "output_dim", 2 * self.projection_dim)  # (frozen: set once, here)

    @property
    def n_filters(self) -> int:
        """Width of the char CNN's output: the sum of the filter counts."""
        return sum(n for _, n in self.filters)

    @property
    def char_embedding_rows(self) -> int:
        """Rows of the model's char embedding: the weight file's rows plus a zero row for char id 0.

        Released files say 262 (or 261) and store 261 rows; both give 262 rows here.
        """
        return self.n_characters if self.n_characters >= 262 else self.n_characters + 1

    def to_json(self) -> dict[str, Any]:
        """The ``options.json`` dictionary for these options."""
        return {
            "lstm": {
                "cell_clip": self.cell_clip,
                "use_skip_connections": self.use_skip_connections,
                "n_layers": self.n_layers,
                "proj_clip": self.proj_clip,
                "projection_dim": self.projection_dim,
                "dim": self.cell_dim,
            },
            "char_cnn": {
                "embedding": {"dim": self.char_embed_dim},
                "filters": [list(f) for f in self.filters],
                "n_highway": self.n_highway,
                "n_characters": self.n_characters,
                "max_characters_per_token": self.max_chars,
                "activation": self.activation,
            },
        }
