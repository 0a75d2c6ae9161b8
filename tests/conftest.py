from contextlib import contextmanager
from pathlib import Path

import pytest

# The small AllenNLP test ELMo (620 KB, Apache-2.0; README.md and NOTICE beside it) travels with the tests,
# so a plain clone runs the parity tests. The corpora (about 28 MB) stay in ../shared beside the checkout.
FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "allennlp_elmo"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA_DIR = SHARED / "data"
CORPORA_HELP = (
    "public corpora (WikiText-2, SST-5/SST-2, TREC-6, WNUT-17; about 28 MB) not found at {path}. They live in "
    "../shared/data beside the checkout; on a machine with a network, `python -m spacy project assets "
    "examples/project` fetches SST-5 and WNUT-17 from their public sources (URLs and checksums in "
    "examples/project/project.yml); WikiText-2 is in GitHub pytorch/examples "
    "(word_language_model/data/wikitext-2/), TREC-6 in harvardnlp/sent-conv-torch; the README of each folder "
    "of ../shared/data gives source, commit and licence"
)


@contextmanager
def torch_threads(n: int):
    """Run the block with torch on ``n`` threads, restoring the previous count (training tests use 1: reproducible)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def load_docs_script(name: str):
    """A script of the repository's docs/ folder, imported as a module (they are not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def require_corpora(path: Path) -> Path:
    """``path`` when the corpora are there; else skip, saying what the data is and how to get it."""
    if not path.exists():
        pytest.skip(CORPORA_HELP.format(path=path))
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The AllenNLP test ELMo (options.json, lm_weights.hdf5) with reference activations, in tests/fixtures."""
    return FIXTURE_DIR


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """``../shared/data``: the public corpora (skips with how to get them when absent)."""
    return require_corpora(DATA_DIR)


@pytest.fixture(scope="session")
def backend(fixture_dir):
    from spacy_elmo import load_bilm

    return load_bilm(fixture_dir)


@pytest.fixture(scope="session")
def fixture_sentences(fixture_dir):
    import json

    groups = json.loads((fixture_dir / "sentences.json").read_text())
    return [s.split() for group in groups for s in group]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: one place says so, and skips them without one."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
