"""``python -m spacy_elmo.cli``: the same command line as ``spacy-elmo``."""

from . import main

if __name__ == "__main__":  # last: every command is registered when the package is imported above
    main()
