"""The product speaks of versions, dates, commits and CPUs, never of work sessions or issue numbers.

A reader of the docs, benchmarks/RESULTS.md, the CHANGELOG, the code and its tests cannot look up "session 6" or
"issue #17"; a date, a commit or a version says the same and can be checked. Commit messages may still cite issues.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEXT_SUFFIXES = {".py", ".md", ".cfg", ".toml", ".yml", ".yaml", ".sh"}
PRODUCT = ("README.md", "CHANGELOG.md", "ARCHITECTURE.md", "mkdocs.yml", "pyproject.toml", "docs", "benchmarks",
           "examples", "spacy_elmo", "tests", ".ci")  # fmt: skip
SKIPPED_DIRS = {"__pycache__", ".pytest_cache", ".mypy_cache", "fixtures", "assets", "corpus", "training"}

# "session" as a work session: a word, but not an HTTP session, pytest's fixture scope or a TensorFlow session.
SESSION = re.compile(r"\bsessions?\b", re.IGNORECASE)
LEGITIMATE_SESSIONS = re.compile(
    r"requests\.Session\(\)|\bsession(?= = requests\.Session\(\))|\bsession(?=\.(?:get|close)\()"
    r"|scope=\"session\"|start_new_session|TensorFlow sessions|HTTP session|`session=`"
)
# "issue 24", "issue #17", "issue-28-engine", "(#23)": a tracker reference.
ISSUE = re.compile(r"\bissues?[ -]?#?\d+|(?<![\w&/])#\d+\b", re.IGNORECASE)


def _product_files() -> list[Path]:
    files: list[Path] = []
    for name in PRODUCT:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in TEXT_SUFFIXES and not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)
            ]
    return [p for p in files if p != Path(__file__).resolve()]


def workshop_words(text: str) -> list[str]:
    """Every work-session or issue-number reference in ``text``, as ``line: match``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        plain = LEGITIMATE_SESSIONS.sub("", line)
        found += [f"{number}: {m.group(0)}" for m in (*SESSION.finditer(plain), *ISSUE.finditer(line))]
    return found


@pytest.mark.parametrize(
    "text",
    ["measured in earlier sessions", "Intel AMX machine, session 6", "## Session 3: three runs", "(issue 27)",
     "(issue #17's target)", "branch `issue-28-engine`", "as in #23", "-- Issue 24, item 9"],
)  # fmt: skip
def test_the_check_finds_workshop_words(text):
    assert workshop_words(text)


@pytest.mark.parametrize(
    "text",
    ["session = requests.Session()", "with session.get(url) as r:", '@pytest.fixture(scope="session")',
     "start_new_session=True", "**No TensorFlow sessions.** `session=` is gone", "both versions issue the same ops",
     "[section](#precision-on-every-cpu-2026-12-01)", "colour &#160; and x[1]  # 3 rows"],
)  # fmt: skip
def test_the_check_lets_other_meanings_through(text):
    assert not workshop_words(text)


def test_the_product_names_no_work_session_and_no_issue_number():
    files = _product_files()
    assert ROOT / "benchmarks" / "RESULTS.md" in files and ROOT / "spacy_elmo" / "bilm" / "encoder.py" in files
    found = {str(p.relative_to(ROOT)): hits for p in files if (hits := workshop_words(p.read_text(encoding="utf-8")))}
    assert not found, f"say the date, commit, version or CPU instead: {found}"
