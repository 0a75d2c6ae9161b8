"""``python -m spacy_elmo.compat.allennlp INPUT OUTPUT --all`` runs AllenNLP 0.9's ``allennlp elmo`` command."""

from .command import main

if __name__ == "__main__":
    main(prog="python -m spacy_elmo.compat.allennlp")
