"""Every module of the package with a ``__main__`` guard runs as ``python -m MODULE``, a real command to the end.

The modules are found by scanning the package, so a new guard without an entry in :data:`COMMANDS` fails here.
The guard must be the module's last statement: anything defined below it does not exist yet when it runs
(``python -m spacy_elmo.cli embed`` once failed with ``NameError`` on a helper defined after the guard).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spacy_elmo"
FIXTURE = ROOT / "tests" / "fixtures" / "allennlp_elmo"

_EMBED = ["embed", "{input}", "{output}", "--model", str(FIXTURE), "--no-progress"]
_ALLENNLP = [
    "{input}",
    "{output}",
    "--all",
    "--options-file",
    str(FIXTURE / "options.json"),
    "--weight-file",
    str(FIXTURE / "lm_weights.hdf5"),
]
# module run by `python -m` -> a command that writes {output} from {input}
COMMANDS: dict[str, list[str]] = {
    "spacy_elmo": _EMBED,
    "spacy_elmo.cli": _EMBED,
    "spacy_elmo.compat.allennlp": _ALLENNLP,
}


def _is_main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators)
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def guarded_modules() -> dict[str, list[ast.stmt]]:
    """Module name (as ``python -m`` takes it) -> its top-level statements, for every module with a guard."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if any(_is_main_guard(node) for node in body):
            found[_module_name(path)] = body
    return found


def test_every_guarded_module_has_a_command_here():
    assert sorted(guarded_modules()) == sorted(COMMANDS)


@pytest.mark.parametrize("module", sorted(guarded_modules()))
def test_the_main_guard_is_the_last_statement(module):
    body = guarded_modules()[module]
    assert _is_main_guard(body[-1]), f"{module}: statements after the __main__ guard run too late for it"


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(COMMANDS))
def test_python_m_runs_the_command(module, tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.hdf5"
    source.write_text("the bank of the river\nmoney in the bank\n", encoding="utf-8")
    args = [a.format(input=source, output=output) for a in COMMANDS[module]]
    done = subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    with h5py.File(output, "r") as written:
        assert written["0"].shape[1:] == (5, 32) and written["1"].shape[1:] == (4, 32)
