"""Two senses of "bank": ELMo gives the same word different vectors in different contexts.

    python examples/bank.py                      # the bundled default model
    python examples/bank.py path/to/elmo_dir     # any directory with options.json + weights .hdf5
"""
import sys

import spacy


def main(model: str = "default") -> None:
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": model})  # found through the spacy_factories entry point
    river, money = nlp.pipe(["They sat on the bank of the river.", "The bank will approve your loan."])
    bank_river, bank_money = river[4], money[1]
    print(f"doc._.elmo_layers: {river._.elmo_layers.shape}  (layers, tokens, dim)")
    print(f"token._.elmo:      {bank_river._.elmo.shape}")
    print(f"cosine similarity of the two {bank_river.text!r} vectors: {bank_river.similarity(bank_money):.4f}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
