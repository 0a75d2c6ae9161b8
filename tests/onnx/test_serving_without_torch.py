"""An ONNX export served without torch: a saved scikit-learn Pipeline and a saved spaCy pipeline whose ELMo model is an
export folder (``spacy-elmo export``) run in a process where ``import torch`` fails, and give the torch path's vectors
(the bundled model's) within 1e-5 of their scale."""

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX export needs the onnx package (pip install onnx)")
pytest.importorskip("onnxruntime", reason="the ONNX runner needs onnxruntime (pip install onnxruntime)")
spacy = pytest.importorskip("spacy")
pytest.importorskip("sklearn")

from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402

from spacy_elmo import ElmoVectorizer  # noqa: E402
from spacy_elmo.output.onnx_export import export_onnx  # noqa: E402

TEXTS = ["a good day .", "a bad day .", "great , really great !", "awful weather all week ."]
DOC = "The cat sat on the mat . It was happy , and then it slept for a very long time ."

# the child: torch refused before anything is imported, then the saved pipelines loaded and run
CHILD = textwrap.dedent(
    """
    import importlib.abc, pickle, sys
    import numpy as np

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is not installed here")

    sys.meta_path.insert(0, NoTorch())
    import spacy

    folder = sys.argv[1]
    nlp = spacy.load(folder + "/spacy")
    doc = nlp(sys.argv[2])
    pipeline = pickle.loads(open(folder + "/sklearn.pkl", "rb").read())
    rows = pipeline[0].transform(sys.argv[3:])
    np.savez(folder + "/child.npz", tensor=doc.tensor, vector=doc.vector, rows=rows, labels=pipeline.predict(sys.argv[3:]))
    assert "torch" not in sys.modules and "onnxruntime" in sys.modules
    print("ok")
    """
)


def within(got: np.ndarray, want: np.ndarray, tolerance: float = 1e-5) -> float:
    """The largest difference relative to ``want``'s scale (asserted at most ``tolerance``)."""
    error = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert got.shape == want.shape and error <= tolerance, error
    return error


@pytest.mark.slow
def test_saved_pipelines_on_an_export_need_no_torch(tmp_path):
    export = tmp_path / "elmo-onnx"
    export_onnx("default", export)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"model": str(export)})
    nlp.to_disk(tmp_path / "spacy")
    pipeline = make_pipeline(ElmoVectorizer(model=str(export)), LogisticRegression()).fit(TEXTS, [1, 0, 1, 0])
    (tmp_path / "sklearn.pkl").write_bytes(pickle.dumps(pipeline))

    reference = spacy.blank("en")
    reference.add_pipe("elmo")  # the torch path on the model the export came from
    want_doc = reference(DOC)
    want_rows = ElmoVectorizer(model="default").fit_transform(TEXTS)

    ran = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), DOC, *TEXTS], capture_output=True, text=True, timeout=600
    )
    assert ran.returncode == 0 and ran.stdout.strip().endswith("ok"), ran.stderr[-4000:]
    child = np.load(tmp_path / "child.npz")
    within(child["tensor"], want_doc.tensor)
    within(child["vector"], want_doc.vector)
    within(child["rows"], want_rows)
    np.testing.assert_array_equal(child["labels"], pipeline.predict(TEXTS))
