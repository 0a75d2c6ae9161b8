"""``python -m spacy_elmo``: the same command line as ``spacy-elmo``."""

from .cli import app

if __name__ == "__main__":
    app(prog_name="python -m spacy_elmo")
