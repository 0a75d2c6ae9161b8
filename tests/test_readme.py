"""Every Python code block of the README runs as written (offline: they use the bundled default model)."""
import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)]
OPTIONAL_MODULES = ("distributed", "dask_ml")  # blocks importing these are skipped without them
NEEDS_TRAINING = "out/model-best"  # blocks that read the pipeline the README's training steps produce


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # blocks that name ~/.cache write under this test's folder
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")  # and none may need the network
    monkeypatch.chdir(tmp_path)
    if NEEDS_TRAINING in BLOCKS[index]:
        pytest.skip("reads a pipeline trained by the README's spacy train steps (tests/test_spacy_training.py trains one)")
    for extra in OPTIONAL_MODULES:
        if f"from {extra}" in BLOCKS[index]:
            pytest.importorskip(extra, reason=f"the block needs {extra} (pip install 'spacy-elmo[test]')")
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {"__name__": "__main__"})  # as a script runs it
