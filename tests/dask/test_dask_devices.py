# ruff: noqa: E402 (the imports below need dask, which pytest.importorskip checks first)
"""spacy_elmo.dask and devices: the workers resolve the device (a CPU client may drive GPU workers), the client
checks only its spelling."""

import numpy as np
import pytest
import torch

pytest.importorskip("dask", reason="Dask is not installed (pip install -e '.[dask]')")

pytestmark = pytest.mark.dask

import dask
import dask.bag as db

from spacy_elmo import ElmoVectorizer
from spacy_elmo.dask import embed_texts, embed_tokens

TEXTS = ["a great movie", "bad plot", "the bank approved the loan"]
no_cuda_here = pytest.mark.skipif(torch.cuda.is_available(), reason="a client without CUDA is what this checks")


@no_cuda_here
@pytest.mark.parametrize("dtype", [None, "auto"])
def test_a_client_without_cuda_builds_work_for_cuda_workers(fixture_dir, dtype):
    """device="cuda" (and dtype="auto", which depends on the device) passes the client; the device is resolved
    where the task runs, so here, a CPU "worker", the task fails with the backend's own error."""
    bag = db.from_sequence(TEXTS, npartitions=2)
    array = embed_texts(bag, model=fixture_dir, device="cuda", precision=dtype)
    records = embed_tokens(bag, model=fixture_dir, device="cuda:0", precision=dtype)
    assert array.shape == (len(TEXTS), 32)
    with dask.config.set(scheduler="synchronous"), pytest.raises(ValueError, match="CUDA is not available"):
        array.compute()
    with dask.config.set(scheduler="synchronous"), pytest.raises(ValueError, match="CUDA is not available"):
        records.compute()


@pytest.mark.parametrize("device", ["gpu", "cuda:x"], ids=["a-word", "a-bad-index"])
def test_a_misspelled_device_is_still_refused_on_the_client(fixture_dir, device):
    with pytest.raises(ValueError, match=f"device={device!r} is not a torch device"):
        embed_texts(db.from_sequence(TEXTS, npartitions=1), model=fixture_dir, device=device)


def test_the_cpu_and_its_auto_dtype_stay_checked_and_chosen_on_the_client(fixture_dir):
    bag = db.from_sequence(TEXTS, npartitions=2)
    with pytest.raises(ValueError, match="layers"):  # every setting checked before any task runs
        embed_texts(bag, model=fixture_dir, device="cpu", layers=7)
    array = embed_texts(bag, model=fixture_dir, device="cpu", precision="auto")
    with dask.config.set(scheduler="synchronous"):
        got = array.compute()
    want = ElmoVectorizer(model=fixture_dir, device="cpu", precision="float32").transform(TEXTS)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
