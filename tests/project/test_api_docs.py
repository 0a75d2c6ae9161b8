"""docs/api.md documents every public name (regenerate it with `python docs/make_api.py`)."""

import importlib
import inspect
from pathlib import Path

from tests.conftest import load_docs_script

ROOT = Path(__file__).resolve().parents[2]


def _make_api():
    return load_docs_script("make_api")


def test_every_public_name_has_a_section_and_a_docstring():
    make_api = _make_api()
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [f"{m}.{n}" for m, n in make_api.public_names() if f"### `{m}.{n}`" not in text]
    assert not missing, f"not in docs/api.md (run python docs/make_api.py): {missing}"
    undocumented = []
    for module_name, name in make_api.public_names():
        obj = getattr(importlib.import_module(module_name), name)
        if (inspect.isclass(obj) or inspect.isroutine(obj)) and not inspect.getdoc(obj):
            undocumented.append(f"{module_name}.{name}")
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_api_md_is_what_make_api_writes_now():
    """A changed signature or docstring must reach the reference: docs/api.md is regenerated, not hand-kept."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert text == _make_api().render(), "docs/api.md is stale: run python docs/make_api.py"
