"""The package's type hints hold: mypy (configured in pyproject.toml) reports no error."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_finds_no_type_errors():
    api = pytest.importorskip("mypy.api", reason="mypy is part of the [test] extra: pip install -e '.[test]'")
    report, errors, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(ROOT / ".mypy_cache"), str(ROOT / "spacy_elmo")]
    )
    assert status == 0, f"mypy found type errors:\n{report}{errors}"
