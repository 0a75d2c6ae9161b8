"""The torch-free serving check (docs/serving.md), in two steps and two environments:

    python .ci/serving_check.py make FOLDER   # with torch: export the bundled model to ONNX, save a scikit-learn
                                             # Pipeline and a spaCy pipeline on the export, and the torch path's vectors
    python .ci/serving_check.py run FOLDER    # in the serving install (no torch): load both, compare, print "ok"

``run`` exits 1 unless both saved pipelines give the torch path's vectors within 1e-5 of their scale (and the
classifier its labels) without torch imported. .ci/serving-pass runs ``make`` in CI's environment and ``run`` in a fresh
one made as docs/serving.md says; tests/onnx/test_serving_without_torch.py runs both with torch refused by an import
hook.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np

TEXTS = ["a good day .", "a bad day .", "great , really great !", "awful weather all week ."]
LABELS = [1, 0, 1, 0]
DOC = "The cat sat on the mat . It was happy , and then it slept for a very long time ."
TOLERANCE = 1e-5  # of the reference's largest absolute value


def make(folder: Path) -> None:
    """The export, the two saved pipelines on it, and the torch path's vectors (the bundled model's)."""
    import spacy
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.output.onnx_export import export_onnx

    folder.mkdir(parents=True, exist_ok=True)
    export = folder / "elmo-onnx"
    export_onnx("default", export)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(export)})
    nlp.to_disk(folder / "spacy")
    pipeline = make_pipeline(ElmoVectorizer(model=str(export)), LogisticRegression()).fit(TEXTS, LABELS)
    (folder / "sklearn.pkl").write_bytes(pickle.dumps(pipeline))
    reference = spacy.blank("en")
    reference.add_pipe("elmo")  # the torch path, on the model the export came from
    doc = reference(DOC)
    rows = make_pipeline(ElmoVectorizer(model="default"), LogisticRegression()).fit(TEXTS, LABELS)
    np.savez(
        folder / "reference.npz",
        tensor=doc.tensor,
        vector=doc.vector,
        rows=rows[0].transform(TEXTS),
        labels=pipeline.predict(TEXTS),
    )


def run(folder: Path) -> list[str]:
    """What differs from the reference beyond :data:`TOLERANCE`, computed without torch (empty: all agree)."""
    import spacy

    doc = spacy.load(folder / "spacy")(DOC)
    pipeline = pickle.loads((folder / "sklearn.pkl").read_bytes())  # the test's own file, made by make()
    got = {"tensor": doc.tensor, "vector": doc.vector, "rows": pipeline[0].transform(TEXTS)}
    want = np.load(folder / "reference.npz")
    problems = []
    for name, array in got.items():
        error = float(np.abs(array - want[name]).max()) / float(np.abs(want[name]).max())
        print(f"{name}: largest difference {error:.2g} of the torch path's scale")
        if array.shape != want[name].shape or not error <= TOLERANCE:
            problems.append(f"{name}: {error:.3g} of the scale (shape {array.shape} vs {want[name].shape})")
    if not np.array_equal(pipeline.predict(TEXTS), want["labels"]):
        problems.append("the classifier's labels differ")
    if "torch" in sys.modules:
        problems.append("torch was imported")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("make", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "make":
        make(Path(argv[1]))
        return 0
    problems = run(Path(argv[1]))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print("ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
