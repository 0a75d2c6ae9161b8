"""Two senses of "bank": ELMo gives the same word different vectors in different contexts.

python examples/bank.py                      # the bundled default model
python examples/bank.py original             # a published model (downloaded once), or a directory
"""

import sys

import spacy

from spacy_elmo import load_bilm
from spacy_elmo.similarity import word_similarity


def main(model: str = "default") -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": model})  # found through the spacy_factories entry point
    river, money = nlp.pipe(["They sat on the bank of the river.", "The bank will approve your loan."])
    bank_river, bank_money = river[4], money[1]
    print(f"doc._.elmo_layers: {river._.elmo_layers.shape}  (layers, tokens, dim)")
    print(f"token._.elmo:      {bank_river._.elmo.shape}")
    print(f"cosine similarity of the two {bank_river.text!r} vectors: {bank_river.similarity(bank_money):.4f}")
    print()
    result = word_similarity(
        load_bilm(model), "They sat on the bank of the river .", "The bank will approve your loan .", "bank"
    )
    print(result.table())
    print(
        "Layer 0 never sees context (always 1.0); the LSTM layers do, so the two senses drift apart there.\n"
        "In the small bundled model layer 0's vectors are 1.5-3.5x longer than the LSTM layers', so the equal mix\n"
        "stays close to 1; a task-trained mix can weigh the context layers more. Compare: python examples/bank.py "
        "original"
    )


if __name__ == "__main__":
    main(*sys.argv[1:2])
