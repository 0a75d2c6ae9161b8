"""Score a trained pipeline on a .spacy file: accuracy (textcat), entity P/R/F (ner), and its learned ELMo mix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import spacy
import typer
from spacy.language import Language
from spacy.scorer import Scorer
from spacy.training import Corpus, Example

from spacy_elmo.spacy import learned_mix


def accuracy(examples: list[Example]) -> float:
    """Share of examples whose highest-scoring predicted category is the gold one (spaCy's cats_score is macro-F)."""
    hits = sum(
        max(eg.predicted.cats, key=eg.predicted.cats.get) == max(eg.reference.cats, key=eg.reference.cats.get)
        for eg in examples
    )
    return hits / len(examples)


def mixes(nlp: Language) -> dict[str, dict[str, Any]]:
    """The learned layer weights and gamma of each component that reads from the elmo component."""
    if "elmo" not in nlp.pipe_names:
        return {}
    return {name: learned_mix(nlp.get_pipe(name))._asdict() for name in nlp.get_pipe("elmo").listening_components}


def evaluate(model: Path, data: Path) -> dict[str, Any]:
    """Test scores of the pipeline in ``model`` on the docs in ``data``, with its mixes."""
    nlp = spacy.load(model)
    examples = list(Corpus(str(data))(nlp))
    for example, doc in zip(examples, nlp.pipe(example.predicted for example in examples)):
        example.predicted = doc  # (nlp.evaluate scores copies, and accuracy needs the predictions)
    scores = Scorer(nlp).score(examples)
    result: dict[str, Any] = {"n_docs": len(examples)}
    if "textcat" in nlp.pipe_names:
        result.update(accuracy=accuracy(examples), cats_macro_f=scores["cats_macro_f"])
    if "ner" in nlp.pipe_names:
        result.update(ents_p=scores["ents_p"], ents_r=scores["ents_r"], ents_f=scores["ents_f"])
    result["mix"] = mixes(nlp)
    return result


def main(model: Path, data: Path) -> None:
    """Print the scores as JSON."""
    print(json.dumps(evaluate(model, data), indent=2))


if __name__ == "__main__":
    typer.run(main)
