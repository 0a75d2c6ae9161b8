"""The built distributions: `python -m build` warns about nothing, the wheel holds the package and its bundled
model, the sdist can run the tests, and the wheel installed in a fresh venv runs the main example."""

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILES = {"README.md", "metrics.json", "options.json", "weights.hdf5", "softmax.safetensors", "vocab.txt"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    pytest.importorskip("build", reason="needs the `build` package (pip install 'spacy-elmo[test]')")
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # else setuptools warns it skips
    run = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    log = run.stdout + run.stderr
    return out, log


def test_build_gives_no_warning(dists):
    _, log = dists
    warnings = [line for line in log.splitlines() if "warn" in line.lower()]
    assert not warnings, warnings


def test_wheel_holds_every_module_the_bundled_model_and_type_marker(dists):
    out, _ = dists
    (wheel,) = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "spacy_elmo").rglob("*.py")}
    assert sources <= names, sorted(sources - names)
    assert {f"spacy_elmo/models/default/{f}" for f in MODEL_FILES} <= names
    assert "spacy_elmo/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "examples/", "docs/", "benchmarks/"))]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    for field in (
        "License-Expression: MIT",
        "Project-URL: Source",
        "Author: spacy-elmo maintainers",
        "Classifier: Framework :: spaCy",
        "Provides-Extra: dask",
        "Requires-Dist: dask-ml",
    ):
        assert field in metadata, field


def test_sdist_can_run_the_tests(dists):
    out, _ = dists
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    tracked = subprocess.run(["git", "ls-files", "tests", "examples", "docs"], cwd=ROOT, capture_output=True, text=True)
    expected = set(tracked.stdout.split()) if tracked.returncode == 0 else set()
    expected |= {
        "tests/conftest.py",
        "tests/numerics.py",
        "tests/fixtures/allennlp_elmo/lm_weights.hdf5",
        "tests/fixtures/allennlp_elmo/NOTICE",
        "examples/bank.py",
        "pyproject.toml",
        "LICENSE",
    }
    assert expected <= names, sorted(expected - names)


def test_wheel_in_a_fresh_venv_runs_the_bank_example(dists, tmp_path):
    out, _ = dists
    (wheel,) = out.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of a source tree may be seen
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        timeout=300,
        env=env,
    )
    # The dependencies (torch, spaCy, ...) from this environment, but not its spacy_elmo: a path entry, not a site dir,
    # so the editable install's .pth there is not read. CI's .ci/run installs the wheel with its real dependencies.
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run(
        [str(python), "-c", "import spacy_elmo; print(spacy_elmo.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0 and where.stdout.startswith(str(site)), where.stdout + where.stderr
    run = subprocess.run(
        [str(python), str(ROOT / "examples" / "bank.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "cosine similarity of the two 'bank' vectors" in run.stdout and "mix (equal weights)" in run.stdout
