"""The contributor tooling agrees with itself: one ruff for pre-commit and CI, CI lints before it type-checks,
and the repository tracks no symbolic link (an sdist or a Windows checkout would lose it)."""

import re
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import srsly
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _pinned_ruff() -> Requirement:
    """The ruff requirement of pyproject.toml's ``test`` extra (the one .ci/run installs)."""
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"(?ms)^test = \[\n(.*?)^\]", pyproject)
    assert extra, "no test extra in pyproject.toml"
    (line,) = [r for r in re.findall(r'"([^"]+)"', extra.group(1)) if Requirement(r).name == "ruff"]
    return Requirement(line)


def test_pre_commit_runs_the_ruff_that_ci_installs():
    config = srsly.yaml_loads((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    (ruff,) = [repo for repo in config["repos"] if repo["repo"].endswith("/astral-sh/ruff-pre-commit")]
    rev = Version(ruff["rev"].lstrip("v"))
    pinned = _pinned_ruff()
    assert pinned.specifier.contains(rev), f"pre-commit's ruff {rev} is outside pyproject's {pinned}"
    assert {hook["id"] for hook in ruff["hooks"]} == {"ruff-check", "ruff-format"}
    # the range is one minor release wide: ruff changes its rules and its formatting between minor releases
    assert Version(version("ruff")).release[:2] == rev.release[:2], "the installed ruff is not pre-commit's"


def test_ci_lints_and_checks_the_format_before_mypy():
    steps = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.startswith('"')]
    commands = [" ".join(line.split()[1:]) for line in steps]
    lint, form, mypy = (commands.index(c) for c in ("check .", "format --check .", "-m mypy"))
    assert lint < mypy and form < mypy


def test_the_repository_tracks_no_symlink():
    files = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout (an sdist)")
    links = [line.split("\t", 1)[1] for line in files.stdout.splitlines() if line.startswith("120000 ")]
    assert not links, f"tracked symbolic links: {links}"
