"""The repository travels: its tracked files stay under a size budget and hold no second copy of a model file.

A checkout is copied whole to the machines that build and test it (a GPU machine without a package index takes
at most 64 MiB with the wheels it needs: benchmarks/gpu_carry.py); training stages' exports and duplicated bundled
files are what grew it before. The budget is for the tracked files of the working tree, not git history.
"""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUDGET_BYTES = 45 * 2**20
LARGE_BYTES = 2**20  # files this size or more must not be tracked twice


def tracked_files(rev: str | None = None) -> dict[str, int]:
    """Each tracked path and its size in bytes: of the working tree, or of commit ``rev``."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked tree's size is checked in the repository only")
    if rev is None:
        names = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, text=True
        ).stdout.split("\0")
        return {name: (ROOT / name).stat().st_size for name in names if name and (ROOT / name).is_file()}
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "-l", "-z", rev], cwd=ROOT, capture_output=True, check=True, text=True
    ).stdout
    sizes = {}
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        size = meta.split()[3]
        if size != "-":
            sizes[name] = int(size)
    return sizes


def over_budget(sizes: dict[str, int]) -> str:
    """Why ``sizes`` breaks the budget ('' when it does not), naming the largest files."""
    total = sum(sizes.values())
    if total <= BUDGET_BYTES:
        return ""
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
    named = ", ".join(f"{name} ({size / 2**20:.1f} MiB)" for name, size in largest)
    return (
        f"tracked files are {total / 2**20:.1f} MiB, over the {BUDGET_BYTES / 2**20:.0f} MiB budget; largest: {named}"
    )


def duplicated(paths: list[Path]) -> list[list[str]]:
    """Groups of paths (relative to the root) with the same bytes."""
    by_digest: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        by_digest[hashlib.sha256(path.read_bytes()).hexdigest()].append(str(path.relative_to(ROOT)))
    return [sorted(group) for group in by_digest.values() if len(group) > 1]


def test_the_tracked_tree_is_within_its_budget():
    assert not over_budget(tracked_files())


def test_no_large_file_is_tracked_twice():
    large = [ROOT / name for name, size in tracked_files().items() if size >= LARGE_BYTES]
    assert duplicated(large) == []


def test_the_budget_rule_fires_on_the_tree_before_the_stage_exports_left():
    """The tree of 2026-12-04 (d8b018d: nine training stages' exports, 248 MB) breaks both rules."""
    rev = "d8b018d"
    if subprocess.run(["git", "cat-file", "-e", rev], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip(f"commit {rev} is not in this clone (a shallow clone)")
    sizes = tracked_files(rev)
    assert over_budget(sizes).startswith("tracked files are 236.1 MiB, over the 45 MiB budget")
    stage9 = subprocess.run(
        [
            "git",
            "rev-parse",
            f"{rev}:training/default-v2/stage-9/weights.hdf5",
            f"{rev}:spacy_elmo/models/default/weights.hdf5",
        ],
        cwd=ROOT,
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split()
    assert stage9[0] == stage9[1]  # the same blob twice: what test_no_large_file_is_tracked_twice refuses


def test_a_recorded_stage_export_is_found_by_its_digest():
    """next_stage.py finds stage 9's export in the bundled default by the sha256 that exports.json records."""
    spec = importlib.util.spec_from_file_location("next_stage", ROOT / "training" / "default-v2" / "next_stage.py")
    next_stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(next_stage)
    assert next_stage.matches_record(next_stage.BUNDLED, 9)
    assert not next_stage.matches_record(next_stage.BUNDLED, 8)
    assert [p.name for p in next_stage.stages()] == [f"stage-{n}" for n in range(1, 10)]
