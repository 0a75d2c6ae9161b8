"""The product speaks of versions, dates, commits and CPUs, never of work sessions or issue numbers, nor of the
machines its own checks ran on.

A reader of the docs, benchmarks/RESULTS.md, the CHANGELOG, the code and its tests cannot look up "session 6" or
"issue #17"; a date, a commit or a version says the same and can be checked. Commit messages may still cite issues.
Nor has a user the machines lent to the project's checks, their limits, or the folder beside the repository's
checkout where its maintainers keep the corpora (``../shared``): the text says what the user needs instead (a
folder holding the corpora: ``--vars.data DIR``).
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


# the machines the project's checks ran on: lent to it, their limits and time (not "the bank lent the company ...")
INFRASTRUCTURE = re.compile(
    r"\blent\b(?=[^.\n]{0,40}\b(?:machines?|GPUs?|checks?|project|tests?)\b)"
    r"|\baccelerators?\b(?=[^.\n]{0,40}\b(?:limits?|budgets?|time|lent|MiB|GiB)\b)|\b(?:device|accelerator) time\b",
    re.IGNORECASE,
)
# the maintainers' folder beside the checkout: the tests, benchmarks, training records and the contributors' page may
# name it, the user's text may not
SHARED_FOLDER = re.compile(r"\.\./shared\b")
USER_FACING = ("README.md", "docs", "examples", "spacy_elmo")
CONTRIBUTORS = ("docs/contributing.md",)


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


def machine_words(text: str, user_facing: bool = True) -> list[str]:
    """Every mention of the project's own check machines (and, in ``user_facing`` text, of ``../shared``), as
    ``line: match``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        hits = [*INFRASTRUCTURE.finditer(line), *(SHARED_FOLDER.finditer(line) if user_facing else ())]
        found += [f"{number}: {m.group(0)}" for m in hits]
    return found


@pytest.mark.parametrize(
    "text",
    ["(the one lent for this project's checks: torch 2.11)", "copied to build machines and accelerators (some take "
     "at most 64 MiB)", "within the accelerator limit", "15 minutes of device time", 'data: "../../../shared/data"',
     "python benchmarks/gpu_check.py --peer ../shared/peers/allennlp_oracle.py"],
)  # fmt: skip
def test_the_check_finds_the_projects_own_machines(text):
    assert machine_words(text)


@pytest.mark.parametrize(
    "text",
    ["The bank lent the company two million dollars .", "Apple lent money to Google .", "--vars.data DIR",
     "a `shared/data` folder beside the checkout", "shared by both directions"],
)  # fmt: skip
def test_the_machine_check_lets_other_meanings_through(text):
    assert not machine_words(text)


def test_the_product_names_no_machine_of_its_own_checks():
    """Nowhere a machine lent to the checks or its limits; in the user's text (README, docs but the contributors'
    page, examples, the package and its data) no ``../shared`` either."""
    files = _product_files()
    found = {}
    for path in files:
        where = path.relative_to(ROOT)
        user_facing = where.parts[0] in USER_FACING and str(where) not in CONTRIBUTORS
        if hits := machine_words(path.read_text(encoding="utf-8"), user_facing):
            found[str(where)] = hits
    assert not found, f"say what a user needs instead (e.g. a folder holding the corpora: --vars.data DIR): {found}"
