import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from spacy_elmo.sources.download import HOME_ENV, home

# The small AllenNLP test ELMo (620 KB, Apache-2.0; README.md and NOTICE beside it) travels with the tests,
# so a plain clone runs the parity tests. The corpora (about 28 MB) stay in ../shared beside the checkout.
FIXTURE_DIR = Path(__file__).resolve().parent / "fixtures" / "allennlp_elmo"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
DATA_DIR = SHARED / "data"
# the skip reason (one actionable line); docs/contributing.md ("Tests") says where each corpus comes from
CORPORA_HELP = (
    "corpora (WikiText-2, SST, TREC-6, WNUT-17) not found at {path}: get them as docs/contributing.md says (Tests)"
)


# The user cache directory the suite sees (platformdirs' XDG_CACHE_HOME) is a folder of its own, made before any test
# runs: a code path that loses SPACY_ELMO_HOME lands there, where only the suite writes, and the user's real cache,
# which other processes (a guide tried while the tests run) may write at any time, is neither touched nor watched.
# the first lines of a child script that runs as if torch were not installed: the path finder does not see torch and
# its submodules (importlib.util.find_spec says None, as other packages ask; the import fails as a missing package's)
REFUSE_TORCH = """
import importlib.machinery, sys

class HideTorch(importlib.machinery.PathFinder):
    # torch as if it were not installed: importlib.util.find_spec("torch") is None, `import torch` fails
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [HideTorch if finder is importlib.machinery.PathFinder else finder for finder in sys.meta_path]
"""


def run_without_torch(code: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``code`` (dedented) run by this Python in a child process where torch is hidden (:data:`REFUSE_TORCH`), with
    this checkout first on its path; the finished process, its output as text."""
    repository = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repository, os.environ.get("PYTHONPATH")]))}
    script = REFUSE_TORCH + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=timeout)


SUITE_USER_CACHE = Path(tempfile.mkdtemp(prefix="spacy-elmo-suite-cache-"))
os.environ["XDG_CACHE_HOME"] = str(SUITE_USER_CACHE)
os.environ.pop(HOME_ENV, None)
# The package's home as the suite's user cache makes it (SPACY_ELMO_HOME unset): no test may write there (downloads,
# unpacked archives, locks all go to the temporary home below).
REAL_HOME = home()


def files_under(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``root`` with its size and modification time (folders: (-1, -1)); {} if absent."""
    found: dict[str, tuple[int, int]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root)] = (-1, -1)
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):  # removed meanwhile
                stat = os.stat(path)
                found[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
    return found


def writes_between(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """The paths that appeared or changed between two :func:`files_under` listings, sorted."""
    return sorted(path for path, state in after.items() if before.get(path) != state)


@pytest.fixture(scope="session", autouse=True)
def temporary_home(tmp_path_factory) -> Path:
    """The package's home (SPACY_ELMO_HOME) is a temporary folder for the whole run: downloads, unpacked archives
    and locks never land in the user's cache. Subprocesses inherit it; a test may point it elsewhere itself."""
    path = tmp_path_factory.mktemp("spacy-elmo-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOME_ENV, str(path))
        yield path


@pytest.fixture(autouse=True)
def the_real_home_untouched(temporary_home):
    """Fails the test (at teardown) that wrote under the user's real home, naming what it wrote."""
    before = files_under(REAL_HOME)
    yield
    written = writes_between(before, files_under(REAL_HOME))
    if written:
        pytest.fail(
            f"this test wrote under the user cache's spacy-elmo home (the suite's own) {REAL_HOME}: "
            f"{', '.join(written[:5])} "
            f"(the temporary home is {HOME_ENV}={temporary_home}; a subprocess given a fresh env= loses it)"
        )


def cli_runner():
    """A typer ``CliRunner`` whose results keep stderr apart (``result.stderr``): click 8.2+ always does, click 8.1 (the
    newest on Python 3.9, the floor pass's) only when asked, with ``mix_stderr=False``, a parameter 8.2 removed."""
    from typer.testing import CliRunner

    try:
        return CliRunner(mix_stderr=False)
    except TypeError:
        return CliRunner()


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


@contextmanager
def imported_script(path: Path):
    """A script outside the package (benchmarks/) imported as the module of its file's name, in ``sys.modules`` while
    the block runs (its dataclasses look their module up there) and removed after it."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def require_corpora(path: Path) -> Path:
    """``path`` when the corpora are there; else skip, saying what the data is and how to get it."""
    if not path.exists():
        pytest.skip(CORPORA_HELP.format(path=path))
    return path


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The AllenNLP test ELMo (options.json, lm_weights.hdf5) with reference activations, in tests/fixtures."""
    return FIXTURE_DIR


class ModelFolder:
    """A private model folder (options.json + weights.hdf5, as the package writes them) of the fixture biLM, whose
    weights a test replaces on disk with others of the same shapes, and puts back."""

    def __init__(self, fixture_dir: Path, folder: Path) -> None:
        from spacy_elmo.bilm.weights import load_model, save_model

        self.model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
        self.path = save_model(self.model, folder)
        self.weights = self.path / "weights.hdf5"
        self.original = self.weights.read_bytes()

    def replace_weights(self, shift: float = 0.05) -> None:
        """Every parameter moved by ``shift``, written over weights.hdf5 by the package's writer (a new file renamed
        over it: same size, new content)."""
        import torch

        from spacy_elmo.bilm.weights import write_weights_file
        from spacy_elmo.groundwork.atomic_write import atomic_path

        with torch.no_grad():
            for parameter in self.model.parameters():
                parameter.add_(shift)
        with atomic_path(self.weights) as tmp:
            write_weights_file(self.model, tmp, shown_as=self.weights)
        assert self.weights.stat().st_size == len(self.original) and self.weights.read_bytes() != self.original

    def put_back(self) -> None:
        """The original weights, written back as a new file."""
        from spacy_elmo.groundwork.atomic_write import atomic_path

        with atomic_path(self.weights) as tmp:
            tmp.write_bytes(self.original)


@pytest.fixture
def model_folder(fixture_dir, tmp_path) -> ModelFolder:
    """A private copy of the fixture biLM in ``tmp_path / "model"`` whose weights the test may replace."""
    return ModelFolder(fixture_dir, tmp_path / "model")


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


def pytest_unconfigure(config):
    shutil.rmtree(SUITE_USER_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need a CUDA device: one place says so, and skips them without one."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tf32_allowed():
    """The process asked for TF32 (what ``set_float32_matmul_precision("high")`` and cuDNN's default do); put back
    afterwards. The settings can be read and written without a GPU."""
    import torch

    from spacy_elmo.bilm import exact

    before = exact._SWITCH._read()
    torch.set_float32_matmul_precision("high")
    exact._SWITCH._put(("tf32", "tf32") if exact._PER_BACKEND else (True, True))
    yield
    exact._SWITCH._put(before)
    torch.set_float32_matmul_precision("highest")
