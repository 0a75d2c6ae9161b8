"""What pyproject.toml declares is what CI tests: every dependency has a lower bound, .ci/run's floor pass installs
exactly those bounds (.ci/floors.py reads them from pyproject.toml) on requires-python's oldest Python, and ruff's
target version and the Python classifiers name the versions that are checked."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
FLOOR_PASS = (ROOT / ".ci" / "floor-pass").read_text(encoding="utf-8")
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
    assert '"$main_python" .ci/floors.py --python' in FLOOR_PASS
    assert '"$main_python" .ci/floors.py >"$venv/floors.txt"' in FLOOR_PASS
    assert '-c "$venv/floors.txt" -e ".[test]"' in FLOOR_PASS and '-c "$venv/floors.txt" "$dist"/*.whl' in FLOOR_PASS
    assert '"$venv/bin/python" -m mypy' in FLOOR_PASS  # the standard library's API as Python 3.9 has it
    assert floors.python() == PYPROJECT["project"]["requires-python"].removeprefix(">=") == "3.9"


def test_ci_runs_the_floor_pass_and_fails_with_it():
    """.ci/run starts both steps of the floor pass and waits for each, and a step that fails fails CI."""
    assert 'start floor-setup .ci/floor-pass setup "$FLOOR_VENV"' in CI and 'finish floor-setup "$FLOOR_SETUP"' in CI
    assert 'start floor-pass .ci/floor-pass test "$FLOOR_VENV" "$DIST"' in CI
    assert 'finish floor-pass "$FLOOR_TESTS"' in CI and 'finish other-pythons "$OTHER_PYTHONS"' in CI


def test_a_failed_background_step_fails_ci_with_its_output(tmp_path):
    """The start/finish helpers of .ci/run, run as .ci/run defines them: a step's exit status and output reach CI."""
    helpers = CI[CI.index("BACKGROUND=()") : CI.index("FLOOR_VENV=")]
    script = tmp_path / "ci.sh"
    script.write_text(
        "set -euo pipefail\n" + helpers + "start good sh -c 'echo fine'\nGOOD=$!\n"
        'start bad sh -c \'echo broken; exit 3\'\nBAD=$!\nfinish good "$GOOD"\nfinish bad "$BAD"\necho unreached\n',
        encoding="utf-8",
    )
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert "fine" in done.stdout and "broken" in done.stdout and "unreached" not in done.stdout
    assert "error: bad failed (exit 3)" in done.stderr


def test_ruff_and_the_classifiers_name_the_pythons_that_are_checked():
    """ruff checks the syntax of the oldest Python (the floor pass runs it); the classifiers list exactly the
    Pythons that run the suite (the floor pass's and this one, the main pass's) or that .ci/run's mypy checks
    (CHECKED_PYTHONS), with no gap between them."""
    floor = tuple(int(part) for part in floors.python().split("."))
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py{}{}".format(*floor)
    (checked,) = re.findall(r"^CHECKED_PYTHONS=\(([^)]*)\)$", CI, flags=re.MULTILINE)
    covered = {floor, sys.version_info[:2], *(tuple(int(p) for p in v.split(".")) for v in checked.split())}
    listed = sorted(
        tuple(int(part) for part in c.rsplit(" :: ", 1)[1].split("."))
        for c in PYPROJECT["project"]["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert listed == sorted(covered), f"list the Pythons {sorted(covered)} in the classifiers, no others"
    assert listed == [(3, minor) for minor in range(floor[1], listed[-1][1] + 1)], "a Python between is unchecked"


def test_the_serving_requirements_are_the_dependencies_but_torch():
    """spacy_elmo/serving_requirements.txt (a torch-free service of ONNX exports, docs/serving.md) is [project]'s
    dependencies, each spelled as there, less torch and safetensors (the torch path and training only), plus the
    onnx extra's onnxruntime: a dependency added or re-bounded cannot leave the serving install behind."""
    from spacy_elmo import SERVING_REQUIREMENTS

    lines = Path(SERVING_REQUIREMENTS).read_text(encoding="utf-8").splitlines()
    listed = [line for line in lines if line.strip() and not line.startswith("#")]
    onnxruntime = [r for r in PYPROJECT["project"]["optional-dependencies"]["onnx"] if r.startswith("onnxruntime")]
    expected = [
        r.split("#")[0].strip()
        for r in PYPROJECT["project"]["dependencies"]
        if not re.match(r"(torch|safetensors)\b", r)
    ]
    assert listed == expected + onnxruntime
