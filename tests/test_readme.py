"""Every Python code block of the README and of the user guide (docs/*.md) runs as written (offline: they use
the bundled default model). docs/api.md is left out: it is generated, and its blocks are signatures."""

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "api.md")]
BLOCKS = [
    (page.relative_to(ROOT).as_posix(), i, textwrap.dedent(block))
    for page in PAGES
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S))
]
OPTIONAL_MODULES = ("distributed", "dask_ml")  # blocks importing these are skipped without them
NEEDS_TRAINING = "out/model-best"  # blocks that read the pipeline the guide's training steps produce
# "before" halves of the migration pages: the peer's own code (not installed here, and needing its network model);
# they are compiled (a syntax error still fails) but not run
PEER_IMPORTS = ("from allennlp", "import allennlp", "from elmoformanylangs", "import simple_elmo", "from simple_elmo")


def test_the_readme_and_the_guide_have_python_blocks():
    per_page = {
        page: sum(1 for p, _, _ in BLOCKS if p == page) for page in (p.relative_to(ROOT).as_posix() for p in PAGES)
    }
    assert per_page["README.md"] >= 1
    for page in ("docs/spacy.md", "docs/sklearn.md", "docs/python.md", "docs/scale-out.md", "docs/training.md"):
        assert per_page[page] >= 1, page
    assert sum(per_page.values()) >= 10  # the nine blocks the long README had, and the tour


@pytest.fixture()
def logging_restored():
    """A block may configure logging, as an application does (docs/speed.md): undo it for the other tests."""
    import logging

    root, package = logging.getLogger(), logging.getLogger("spacy_elmo")
    saved = (root.level, list(root.handlers), package.level)
    yield
    for handler in root.handlers[len(saved[1]) :]:
        root.removeHandler(handler)
    root.setLevel(saved[0])
    package.setLevel(saved[2])


def _marks(block: str) -> list:
    """A block using Dask carries the ``dask`` marker; one that starts a cluster is also ``slow``."""
    if not re.search(r"^\s*(from|import) (dask|distributed)\b", block, re.M):
        return []
    return [pytest.mark.dask, pytest.mark.slow] if "LocalCluster" in block or "Client(" in block else [pytest.mark.dask]


@pytest.mark.parametrize(
    "page, index, block",
    [pytest.param(*b, marks=_marks(b[2]), id=f"{b[0]}-{b[1]}") for b in BLOCKS],
)
def test_block_runs(page, index, block, tmp_path, monkeypatch, logging_restored):
    monkeypatch.setenv("HOME", str(tmp_path))  # blocks that name ~/.cache write under this test's folder
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")  # and none may need the network
    monkeypatch.chdir(tmp_path)
    if NEEDS_TRAINING in block:
        pytest.skip(
            "reads a pipeline trained by the guide's spacy train steps (tests/test_spacy_training.py trains one)"
        )
    for extra in OPTIONAL_MODULES:
        if f"from {extra}" in block:
            pytest.importorskip(extra, reason=f"the block needs {extra} (pip install 'spacy-elmo[test]')")
    code = compile(block, f"{page} python block {index}", "exec")
    if any(line.lstrip().startswith(PEER_IMPORTS) for line in block.splitlines()):
        pytest.skip("the peer's own code, shown for comparison (compiled, not run)")
    exec(code, {"__name__": "__main__"})  # as a script runs it


def test_the_pictures_appear_where_people_look():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    guide = "\n".join(p.read_text(encoding="utf-8") for p in PAGES[1:])
    assert "docs/images/bank_similarity.png" in readme
    for image in sorted((ROOT / "docs" / "images").glob("*.png")):
        assert f"](images/{image.name})" in guide, image.name


def test_the_readme_is_short_and_keeps_the_two_setup_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 100
    for command in (
        "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e . && "
        ".venv/bin/python examples/bank.py",
        'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 && .venv/bin/pip install -e ".[test]" && '
        ".venv/bin/python -m pytest -q",
    ):
        assert f"```bash\n{command}\n```" in readme


def test_the_guide_builds_strictly(tmp_path):
    """mkdocs build --strict: every page in the nav, every link and anchor resolves (also run by .ci/run)."""
    pytest.importorskip("mkdocs", reason="mkdocs is in the [docs] and [test] extras")
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "site" / "spacy" / "index.html").is_file()


def _page(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_the_component_config_table_has_every_setting():
    """docs/spacy.md's config table: one row per key of the elmo factory's config (`add_pipe(config=...)`)."""
    from spacy_elmo.spacy.pipeline_component import DEFAULT_CONFIG

    rows = set(re.findall(r"^\| `(\w+)` \|", _page("docs/spacy.md"), re.M))
    missing = [key for key in DEFAULT_CONFIG["elmo"] if key not in rows]
    assert not missing, f"docs/spacy.md's config table lacks {missing}"


def test_the_sklearn_page_signature_is_elmo_vectorizers():
    """docs/sklearn.md spells out ElmoVectorizer's signature: every parameter, in order, with its default."""
    import ast
    import inspect

    from spacy_elmo import ElmoVectorizer

    written = re.search(r"^`(ElmoVectorizer\(.*\))`$", _page("docs/sklearn.md"), re.M)
    assert written, "docs/sklearn.md has no `ElmoVectorizer(...)` signature line"
    call = ast.parse(written.group(1), mode="eval").body
    documented = [(k.arg, ast.literal_eval(k.value)) for k in call.keywords]
    actual = [(name, p.default) for name, p in inspect.signature(ElmoVectorizer).parameters.items()]
    assert documented == actual


def test_the_cli_page_table_has_every_command():
    import typer.main

    from spacy_elmo.cli import app

    first_cells = re.findall(r"^\|([^|]*)\|", _page("docs/cli.md"), re.M)  # `train`, `evaluate` share a row
    table = {name for cell in first_cells for name in re.findall(r"`([\w-]+)", cell)}
    missing = sorted(set(typer.main.get_command(app).commands) - table)
    assert not missing, f"docs/cli.md's command table lacks {missing}"


def test_the_readme_and_the_index_link_every_migration_page():
    pages = sorted(p.name for p in (ROOT / "docs").glob("migrating-from-*.md"))
    assert len(pages) >= 3
    readme, index = _page("README.md"), _page("docs/index.md")
    for name in pages:
        assert f"](docs/{name})" in readme, name
        assert f"]({name})" in index, name
