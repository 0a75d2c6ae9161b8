"""The package's type hints hold: mypy (configured in pyproject.toml) reports no error."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mypy_finds_no_type_errors():
    api = pytest.importorskip("mypy.api", reason="mypy is part of the [test] extra: pip install -e '.[test]'")
    report, errors, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(ROOT / "spacy_elmo"),
        ]
    )
    assert status == 0, f"mypy found type errors:\n{report}{errors}"


@pytest.mark.slow
def test_a_users_project_sees_the_installed_types(tmp_path, monkeypatch):
    """mypy run in another project (as a user would) finds spacy_elmo's modules and hints, editable install included."""
    api = pytest.importorskip("mypy.api", reason="mypy is part of the [test] extra: pip install -e '.[test]'")
    monkeypatch.chdir(tmp_path)  # not the checkout: the package must come from the installation
    (tmp_path / "app.py").write_text(
        "from spacy_elmo import load_bilm\nfrom spacy_elmo.hub import *  # noqa\nimport spacy_elmo.hub\n"
        "backend = load_bilm('default')\nn: str = backend.n_layers\n"
    )
    report, _errors, _status = api.run(
        ["--cache-dir", str(ROOT / ".mypy_cache"), "app.py"]
    )  # the cache the check above fills
    assert "spacy_elmo.hub" not in report and "library stub" not in report, report
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in report, report
