"""What ``spacy-elmo --help`` and each command's ``--help`` say beyond the commands' own docstrings and options: the
command listing, in the order a new user needs the commands (embedding first, training later), each command's
one-sentence summary, and the examples its ``--help`` ends with."""

from __future__ import annotations

from typing import Optional

APP_HELP = (
    "ELMo contextual word vectors for spaCy and scikit-learn: embed text files, train, evaluate and inspect biLMs."
)
APP_EXAMPLES = ("spacy-elmo embed sentences.txt vectors.hdf5", "spacy-elmo embed --help")

# command name -> (its summary in the listing, the examples its --help ends with), in the listing's order
COMMANDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "embed": (
        "Embed each line of a text file into an HDF5 file.",
        (
            "spacy-elmo embed sentences.txt vectors.hdf5",
            "spacy-elmo embed sentences.txt vectors.hdf5 --model original --average",
        ),
    ),
    "info": ("Describe a model: architecture, size, corpus, perplexity.", ("spacy-elmo info default",)),
    "models": ("List the bundled and published models, and which are cached.", ("spacy-elmo models",)),
    "download": ("Fetch models into the download cache ahead of use.", ("spacy-elmo download original",)),
    "export": (
        "Export a model to ONNX, to serve it without torch.",
        ("spacy-elmo export default elmo-onnx --format onnx",),
    ),
    "similarity": (
        "Compare one word's vectors in two sentences, layer by layer.",
        ('spacy-elmo similarity "They sat on the bank ." "The bank approved the loan ." --word bank',),
    ),
    "train": (
        "Train or fine-tune a biLM on text and export it.",
        ("spacy-elmo train my_elmo --train corpus.txt --valid dev.txt --arch small --max-minutes 60",),
    ),
    "prepare-corpus": (
        "Tokenize a large corpus once into shards for training.",
        ("spacy-elmo prepare-corpus prepared --source wiki_dump --format wikiextractor",),
    ),
    "evaluate": ("Measure a trained biLM's perplexity on text files.", ("spacy-elmo evaluate my_elmo test.txt",)),
    "adapt": (
        "Fine-tune a biLM on the text of a spaCy task's docs.",
        ("spacy-elmo adapt adapted_elmo --train train.spacy --dev dev.spacy",),
    ),
    "plot-mix": (
        "Plot the layer weights a trained spaCy pipeline learned.",
        ("spacy-elmo plot-mix training/model-best mix.png",),
    ),
    "allennlp-elmo": ("Run AllenNLP 0.9's `allennlp elmo` command on this package.", ()),  # --help: AllenNLP's
}


def examples(lines: tuple[str, ...]) -> Optional[str]:
    """A help text's example block, kept as written (click rewraps paragraphs, but not those marked with \\b); None
    when there are no examples."""
    if not lines:
        return None
    return "\b\n" + ("Example:" if len(lines) == 1 else "Examples:") + "".join(f"\n  {line}" for line in lines)


def listing_position(name: str) -> int:
    """Where command ``name`` stands in the listing (a command :data:`COMMANDS` lacks: last)."""
    order = list(COMMANDS)
    return order.index(name) if name in order else len(order)
