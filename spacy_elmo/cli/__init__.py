"""The ``spacy-elmo`` command line (also ``python -m spacy_elmo`` and ``python -m spacy_elmo.cli``): embed, train,
evaluate, info.

Every command parses and checks its arguments, then delegates to the group that does the work. :data:`app` is the
typer app of :mod:`.typer_app`; importing this package registers each command on it, from the module of its kind
(:mod:`.vector_commands`, :mod:`.model_commands`, :mod:`.train_commands`), as spaCy's own command line does.
"""

from __future__ import annotations

from . import model_commands, train_commands, vector_commands  # noqa: F401 (each registers its commands on app)
from .typer_app import app

__all__ = ["app", "main"]


def main() -> None:
    """Run the command line on ``sys.argv``, as the ``spacy-elmo`` script does."""
    app()
