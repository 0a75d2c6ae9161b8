"""The shipped models, the docs, the benchmark log, the training records and the examples name no directory of the
machine that made them (a work folder, a temporary folder, a home directory): a path there is relative, a
placeholder the text explains (``DATA``, ``OUT``), or a name. ``spacy-elmo train`` records its paths that way
(spacy_elmo/train/output_folder/recorded_paths.py); this keeps the files written by hand, and the records already
shipped, so.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("spacy_elmo/models", "docs", "README.md", "benchmarks/RESULTS.md", "training", "examples")
BINARY_SUFFIXES = {".hdf5", ".safetensors", ".png", ".jpg", ".pyc", ".spacy", ".sqlite3"}
# a path from the root into a machine's work, temporary or home folders (not part of a URL or of a relative path)
MACHINE_PATH = re.compile(r"(?<![\w/.~-])(?:/work/|/tmp/|/var/tmp/|/root/|/home/[^/\s`'\"]+/|/Users/[^/\s`'\"]+/)")
# file (relative to the repository) -> why a path of that kind there is what a user must type; none today
ALLOWED: dict[str, str] = {}


def machine_paths(text: str) -> list[str]:
    """Every path into a machine's own folders in ``text``, as ``line: excerpt``."""
    return [f"{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1) if MACHINE_PATH.search(line)]


@pytest.mark.parametrize(
    "text",
    ['"command": "/work/wt/x/spacy_elmo/__main__.py train /tmp/out"', "--valid /home/alice/data/valid.txt",
     "`/root/.cache/spacy-elmo`", "(`/tmp/peer-venv`, torch 2.13)", '"/Users/bob/runs/stage-1"'],
)  # fmt: skip
def test_the_scan_finds_a_machines_paths(text):
    assert machine_paths(text)


@pytest.mark.parametrize(
    "text",
    ["https://example.org/work/tmp/x", "--valid wikitext-2/valid.txt", "DATA/prep/wiki", "~/elmo_models",
     "/usr/bin/time -v", "a/tmp/b", "OUT/stage-9", "$HOME/.cache"],
)  # fmt: skip
def test_the_scan_lets_other_paths_through(text):
    assert not machine_paths(text)


def _written_by_the_example() -> set[Path]:
    """The folders a run of examples/project writes (its outputs, not the repository's files)."""
    import srsly

    project = ROOT / "examples" / "project"
    return {project / name for name in srsly.read_yaml(project / "project.yml").get("directories", [])}


def _scanned_files() -> list[Path]:
    skipped = _written_by_the_example()
    files = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [
            p
            for p in candidates
            if p.suffix not in BINARY_SUFFIXES
            and "__pycache__" not in p.parts
            and not any(folder in p.parents for folder in skipped)
        ]
    return files


def test_the_shipped_files_and_docs_name_no_path_of_the_machine_that_made_them():
    files = _scanned_files()
    assert ROOT / "spacy_elmo" / "models" / "default" / "metrics.json" in files
    assert ROOT / "benchmarks" / "RESULTS.md" in files and ROOT / "examples" / "project" / "project.yml" in files
    found = []
    for path in files:
        where = str(path.relative_to(ROOT))
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if where not in ALLOWED:
            found += [f"{where}:{hit}" for hit in machine_paths(text)]
    assert not found, (
        "a path of the machine that made these files (name it relative, by a placeholder the text explains, "
        "or by name): " + "; ".join(found[:20]) + (f" ... and {len(found) - 20} more" if len(found) > 20 else "")
    )
