"""How often a call goes back over its own ground, as the code runs it (ARCHITECTURE.md, "Three walks").

Each value is checked once, where it enters: ``nlp(text)`` checks its tokens once (the backend's check of token
lists) and the windows never call back into the component that handed them its segments; a fitted
``ElmoVectorizer.transform`` resolves its model to files once and looks at them once, for the pin's check and the
loaded model's. Counted by code object, so a function imported under another name is counted too.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from types import CodeType

import pytest

spacy = pytest.importorskip("spacy")
pytest.importorskip("sklearn")

from spacy_elmo.runtime.configuration import validation  # noqa: E402
from spacy_elmo.sources import model_paths  # noqa: E402
from spacy_elmo.sources.pinned_model import PinnedModel  # noqa: E402

COMPONENT = "spacy_elmo.spacy."
WINDOWS = "spacy_elmo.runtime.embedding.windows"


def counted_calls(call: Callable[[], object], functions: dict[str, Callable]) -> Counter:
    """How many times ``call`` calls each of ``functions`` (by name), and, as ``"back into the component"``, a
    function of spacy/ while a frame of the windows is on the stack."""
    codes: dict[CodeType, str] = {function.__code__: name for name, function in functions.items()}
    counts: Counter = Counter()

    def profile(frame, event, arg):
        if event != "call":
            return
        name = codes.get(frame.f_code)
        if name is not None:
            counts[name] += 1
        if frame.f_globals.get("__name__", "").startswith(COMPONENT):
            outer = frame.f_back
            while outer is not None:
                if outer.f_globals.get("__name__") == WINDOWS:
                    counts["back into the component"] += 1
                    break
                outer = outer.f_back

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.fixture(scope="module")
def nlp():
    pipeline = spacy.blank("en")
    pipeline.add_pipe("elmo")
    pipeline("The bank of the river .")  # loaded
    return pipeline


def test_nlp_checks_its_tokens_once_and_the_windows_never_call_back_into_the_component(nlp):
    counts = counted_calls(lambda: nlp("a new sentence"), {"token check": validation.check_tokens})
    assert counts["token check"] == 1, "the tokens of one sentence were checked more than once (or never)"
    assert counts["back into the component"] == 0, (
        "the windows called back into spacy/ while embedding (a lazy segment stream): the component hands them its "
        "segments found whole"
    )


def test_the_trace_sees_a_call_back_from_the_windows(nlp):
    """Guards the check above against passing because the trace sees nothing: a lazy stream of segments that calls
    spacy/'s position getter as the windows read it is seen."""
    import numpy as np

    from spacy_elmo.runtime.embedding.windows import embed_segments
    from spacy_elmo.spacy.pipeline_component import sentence_positions

    class Backend:
        n_layers, dim = 0, 1

        def embed(self, sentences, **kwargs):
            return [np.zeros((1, len(s), 1), dtype=np.float32) for s in sentences]

    doc = nlp.make_doc("a lazy stream")
    segments = ((0, [d[i].text for i in group]) for d in [doc] for group in sentence_positions(d))
    counts = counted_calls(lambda: list(embed_segments(Backend(), segments)), {})
    assert counts["back into the component"] >= 1


@pytest.fixture(scope="module")
def fitted():
    from spacy_elmo import ElmoVectorizer

    vectorizer = ElmoVectorizer().fit(["The bank of the river ."])
    vectorizer.transform(["warm up"])
    return vectorizer


def test_transform_resolves_its_model_once_and_looks_at_its_files_once(fitted):
    counts = counted_calls(
        lambda: fitted.transform(["a new text here"]),
        {
            "pin resolved": PinnedModel.resolve,
            "model resolved to files": model_paths.resolve_model_files,
            "files looked at": model_paths.fingerprint,
        },
    )
    assert counts == {"pin resolved": 1, "model resolved to files": 1, "files looked at": 1}, counts
