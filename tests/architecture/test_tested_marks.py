"""Every rule ARCHITECTURE.md marks as tested names its test: the test file, and the test function where one test
holds the rule. A mark that names nothing sends a reader hunting for the check; one that names a file or a function
that is gone claims a check that no longer runs."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"

MARK = "(tested"
# a path into tests/ as a mark writes it (``tests/x/test_y.py``, ``tests/x/test_y.py::test_z``, or a bare folder)
TEST_PATH = re.compile(r"tests/[\w/.]*(?:::\w+)?")


def marks(markdown: str) -> list[tuple[int, str]]:
    """``(line, text)`` of each ``(tested ...)`` mark: from its opening parenthesis to the one that closes it, over
    as many lines as it takes, its white space collapsed."""
    found = []
    start = markdown.find(MARK)
    while start != -1:
        depth, end = 0, start
        for end in range(start, len(markdown)):
            depth += {"(": 1, ")": -1}.get(markdown[end], 0)
            if depth == 0:
                break
        found.append((markdown.count("\n", 0, start) + 1, " ".join(markdown[start : end + 1].split())))
        start = markdown.find(MARK, end + 1)
    return found


def functions_of(path: Path) -> set[str]:
    """The names of the functions ``path`` defines (test functions, and those of its test classes)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def problems(mark: str, root: Path = ROOT) -> list[str]:
    """What is wrong with one mark: it names no test file, names a folder, or names a file or function that is
    not there; empty when every path it names exists and one of them is a test file."""
    found = []
    named = [path.rstrip(".") for path in TEST_PATH.findall(mark)]
    if not any(Path(path.split("::")[0]).name.startswith("test_") for path in named):
        found.append("names no test file (tests/<group>/test_<x>.py, ::test_<name> where one test holds the rule)")
    for path in named:
        file, _, function = path.partition("::")
        if not (root / file).is_file():
            found.append(f"{path}: {'a folder, not a test file' if (root / file).is_dir() else 'no such file'}")
        elif function and function not in functions_of(root / file):
            found.append(f"{path}: {file} has no function {function}")
    return found


def test_the_mark_reader_sees_what_each_mark_names(tmp_path):
    """Guards the check below: marks over several lines are read whole; a mark naming nothing, a folder, a missing
    file or a missing function is found; one naming an existing test file and function is not."""
    (tmp_path / "tests" / "group").mkdir(parents=True)
    (tmp_path / "tests" / "group" / "test_x.py").write_text("def test_one():\n    pass\n", encoding="utf-8")
    markdown = (
        "- **A** *(tested)*: prose.\n"
        "- **B** *(tested: tests/group/, the rest)*\n"
        "- **C** *(tested:\n  tests/group/test_x.py::test_one; its why (in words))*\n"
        "- **D** *(tested: tests/group/test_x.py::test_two, tests/group/test_gone.py)*\n"
        "- **E** *(tested, lazy imports too)*: no mark names this (tests/group/test_x.py), it lies outside one\n"
    )
    found = {line: problems(text, tmp_path) for line, text in marks(markdown)}
    assert list(found) == [1, 2, 3, 5, 6]
    assert marks(markdown)[2][1] == "(tested: tests/group/test_x.py::test_one; its why (in words))"
    assert found[3] == []
    assert found[1] == found[6] and len(found[1]) == 1 and "names no test file" in found[1][0]
    assert found[2][-1] == "tests/group/: a folder, not a test file"
    assert found[5] == [
        "tests/group/test_x.py::test_two: tests/group/test_x.py has no function test_two",
        "tests/group/test_gone.py: no such file",
    ]


def test_every_tested_mark_names_an_existing_test():
    """Each ``(tested ...)`` of ARCHITECTURE.md names the test that holds its rule, and that test exists."""
    wrong = [
        f"line {line}: {text[:90]}{'...' if len(text) > 90 else ''}\n    " + "\n    ".join(found)
        for line, text in marks(ARCHITECTURE.read_text(encoding="utf-8"))
        if (found := problems(text))
    ]
    assert not wrong, "ARCHITECTURE.md's tested marks that name no existing test:\n" + "\n".join(wrong)
