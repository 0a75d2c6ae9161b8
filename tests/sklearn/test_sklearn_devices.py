"""ElmoVectorizer on a device: the same rows on CUDA as on the CPU, and no silent fallback without CUDA.

Imports neither spaCy nor pandas and tokenizes on whitespace, so the GPU check (benchmarks/gpu_check.py) runs it on
a machine without them.
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

from spacy_elmo import ElmoVectorizer

TEXTS = ["The bank approved the loan .", "I sat on the river bank .", "", "Birds  fly\n south ."]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_unavailable_device_is_an_error_not_a_fallback(fixture_dir):
    with pytest.raises(ValueError, match="CUDA is not available"):
        ElmoVectorizer(model=str(fixture_dir), device="cuda").fit(["a"])


@pytest.mark.gpu
def test_cuda_rows_match_cpu(fixture_dir):
    cpu = ElmoVectorizer(model=str(fixture_dir), tokenizer="whitespace").transform(TEXTS)
    cuda = ElmoVectorizer(model=str(fixture_dir), tokenizer="whitespace", device="cuda").transform(TEXTS)
    np.testing.assert_allclose(cuda, cpu, atol=1e-5)  # float32 on both: sums in another order, never TF32


@pytest.mark.slow
def test_token_lists_and_whitespace_tokens_never_import_spacy(fixture_dir):
    """Only a spaCy tokenizer or Doc input needs spaCy: the vectorizer itself does not import it (spaCy's import is a
    large part of a process's start-up, and the GPU machine has none)."""
    code = (
        "import sys; from spacy_elmo import ElmoVectorizer; "
        f"ElmoVectorizer(model={str(fixture_dir)!r}).fit_transform([['a', 'bank'], ['the', 'river']]); "
        f"ElmoVectorizer(model={str(fixture_dir)!r}, tokenizer='whitespace').fit_transform(['a bank', 'the river']); "
        "assert 'spacy' not in sys.modules, 'spaCy imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
