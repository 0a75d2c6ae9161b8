from contextlib import contextmanager
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FIXTURE_DIR = SHARED / "fixtures" / "allennlp_elmo"
DATA_DIR = SHARED / "data"


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


def require_shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"reference data not found at {path} (expected ../shared beside the checkout)")
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The AllenNLP test ELMo (options.json, lm_weights.hdf5) with reference activations."""
    return require_shared(FIXTURE_DIR)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return require_shared(DATA_DIR)


@pytest.fixture(scope="session")
def backend(fixture_dir):
    from spacy_elmo import load_bilm

    return load_bilm(fixture_dir)


@pytest.fixture(scope="session")
def fixture_sentences(fixture_dir):
    import json

    groups = json.loads((fixture_dir / "sentences.json").read_text())
    return [s.split() for group in groups for s in group]
