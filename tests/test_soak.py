"""A soak of every front end on one backend: more than 100,000 distinct tokens in varied call sequences.

Text with many distinct tokens (figures, item numbers, codes) after small calls is what filled and evicted the
token-vector cache in ways that random short sentences never did. Here the spaCy component, the scikit-learn
vectorizer and ``load_bilm().embed`` take turns on one shared backend (its default caches), small calls between big
ones, in several batch sizes, now and then on emptied caches (as in a new process), until more than 100,000 distinct
tokens went through; then a sample of what each gave is recomputed with every cache off and must agree.
"""

import random
import shutil

import numpy as np
import pytest
import spacy

from spacy_elmo import ElmoVectorizer, load_bilm
from tests.numerics import assert_recomputed_close

DISTINCT_TOKENS = 100_000


class ReportLines:
    """Lines like "Quarterly figures : item 51494 sold 6900 units , ref K7Q2 ..." whose numbers and codes are new."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next = 0
        self.vocabulary: set[str] = set()

    def fresh(self) -> str:
        self.next += 1
        return self.rng.choice(["{}", "#{}", "K{}Q", "{}.5", "item-{}"]).format(self.next)

    def line(self) -> str:
        n = self.rng.randint(6, 30)
        fresh = [self.fresh() for _ in range(n)]
        words = ["Quarterly", "figures", ":", "item", fresh[0], "sold", fresh[1], "units", ",", "ref", *fresh[2:], "."]
        self.vocabulary.update(words)
        return " ".join(words)

    def lines(self, n: int) -> list[str]:
        return [self.line() for _ in range(n)]


@pytest.mark.slow
def test_more_than_100k_distinct_tokens_through_every_front_end(fixture_dir, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(fixture_dir, folder)  # a backend of its own, with the default caches
    backend = load_bilm(folder)
    vectorizer = ElmoVectorizer(model=str(folder), tokenizer="whitespace")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(folder)})
    rng = random.Random(0)
    text = ReportLines(seed=1)
    samples: list[tuple[str, str, np.ndarray]] = []

    def run(front: str, texts: list[str], batch_size: int) -> list[np.ndarray]:
        if front == "vectorizer":
            vectorizer.set_params(batch_size=batch_size)
            return list(vectorizer.fit_transform(texts))
        if front == "spacy":
            return [doc._.elmo_layers for doc in nlp.pipe(texts, batch_size=batch_size)]
        return backend.embed([t.split() for t in texts], batch_size=batch_size)

    turn = 0
    while len(text.vocabulary) < DISTINCT_TOKENS:
        front = ["vectorizer", "spacy", "embed"][turn % 3]
        if turn % 4 == 0:
            backend.clear_cache()  # as in a new process: the token cache starts empty
        small = [rng.choice(["a great movie", "bad plot", "good fun"])]  # a small call first, as a user tries one
        run(front, small, batch_size=8)
        texts = text.lines(rng.choice([20, 200, 300, 500]))
        out = run(front, texts, batch_size=rng.choice([16, 64, 256]))
        assert len(out) == len(texts) and all(np.isfinite(a).all() for a in out)
        for i in rng.sample(range(len(texts)), 2):
            samples.append((front, texts[i], out[i]))
        turn += 1
    assert turn >= 3  # every front end had its turn
    assert len(backend.token_cache) <= backend.token_cache.max_tokens

    backend.configure_cache(cache_mb=0, token_cache_size=0)  # recomputed with no cache at all
    for front, sample, got in samples:
        assert_recomputed_close(got, run(front, [sample], batch_size=1)[0])
