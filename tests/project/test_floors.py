"""What pyproject.toml declares is what CI tests: every dependency has a lower bound, .ci/run's floor pass installs
exactly those bounds (.ci/floors.py reads them from pyproject.toml) on requires-python's oldest Python, and ruff's
target version and the Python classifiers name the versions that are checked."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _floors():
    spec = importlib.util.spec_from_file_location("floors", ROOT / ".ci" / "floors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


floors = _floors()


def _declared() -> dict[str, str]:
    """Every requirement of the dependencies and the extras the floor pass installs, by name: its text."""
    meta = PYPROJECT["project"]
    texts = [*meta["dependencies"], *(t for extra in floors.EXTRAS for t in meta["optional-dependencies"][extra])]
    return {re.split(r"[\[<>=!~ ;]", text, maxsplit=1)[0]: text for text in texts}


def test_the_floor_pass_pins_every_declared_lower_bound():
    pins = dict(line.split("==") for line in floors.constraints())
    declared = {name: text for name, text in _declared().items() if name not in floors.TOOLS}
    assert set(pins) == set(declared)
    for name, text in declared.items():
        (bound,) = re.findall(r">=\s*([^,;\s]+)", text)
        assert pins[name] == bound, (name, text)


def test_a_dependency_without_a_lower_bound_stops_the_floor_pass(tmp_path, monkeypatch):
    broken = (ROOT / "pyproject.toml").read_text(encoding="utf-8").replace('"numpy>=1.22"', '"numpy"')
    assert broken != (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(broken, encoding="utf-8")
    monkeypatch.setattr(floors, "PYPROJECT", tmp_path / "pyproject.toml")
    with pytest.raises(SystemExit, match=r"no lower bound \(>=\) for numpy"):
        floors.constraints()


def test_ci_installs_the_floors_on_the_oldest_python_and_the_wheel_there():
    assert '"$VENV/bin/python" .ci/floors.py --python' in CI and '"$VENV/bin/python" .ci/floors.py >"$FLOORS"' in CI
    assert '-c "$FLOORS" -e ".[test]"' in CI and '-c "$FLOORS" "$DIST"/*.whl' in CI
    assert '"$FLOOR_VENV/bin/python" -m mypy' in CI  # the standard library's API as Python 3.9 has it
    assert floors.python() == PYPROJECT["project"]["requires-python"].removeprefix(">=") == "3.9"


def test_ruff_and_the_classifiers_name_the_pythons_that_are_checked():
    """ruff checks the syntax of the oldest Python (the floor pass runs it); the classifiers list the versions from
    that floor up to the Python of the main pass, which runs this test."""
    floor = tuple(int(part) for part in floors.python().split("."))
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py{}{}".format(*floor)
    listed = sorted(
        tuple(int(part) for part in c.rsplit(" :: ", 1)[1].split("."))
        for c in PYPROJECT["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert listed[0] == floor and listed == [(3, minor) for minor in range(floor[1], listed[-1][1] + 1)]
    assert sys.version_info[:2] in listed, f"Python {sys.version_info[:2]} runs the suite: list it in the classifiers"
