"""Every Python code block and every offline shell command of the README and of the user guide (docs/*.md) runs as
written (offline: they use the bundled default model); the README's figures are recomputed or quoted from the model
card. docs/api.md is left out: it is generated, and its blocks are signatures."""

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
            "reads a pipeline trained by the guide's spacy train steps (tests/spacy/test_spacy_training.py trains one)"
        )
    for extra in OPTIONAL_MODULES:
        if f"from {extra}" in block:
            pytest.importorskip(extra, reason=f"the block needs {extra} (pip install -e '.[test]' in the checkout)")
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
    """docs/sklearn.md spells out ElmoVectorizer's signature: every parameter, in order, with its default, and which
    are keyword-only."""
    import ast
    import inspect

    from spacy_elmo import ElmoVectorizer

    written = re.search(r"^`(ElmoVectorizer\(.*\))`$", _page("docs/sklearn.md"), re.M)
    assert written, "docs/sklearn.md has no `ElmoVectorizer(...)` signature line"
    arguments = ast.parse(f"def {written.group(1)}: pass").body[0].args
    defaults = [*arguments.defaults, *arguments.kw_defaults]
    documented = [
        (a.arg, ast.literal_eval(d), a in arguments.kwonlyargs)
        for a, d in zip([*arguments.args, *arguments.kwonlyargs], defaults)
    ]
    actual = [
        (name, p.default, p.kind is inspect.Parameter.KEYWORD_ONLY)
        for name, p in inspect.signature(ElmoVectorizer).parameters.items()
    ]
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


# -- what the README says of the bundled model: each figure recomputed here or quoted from its model card ----------


def _unit(vector):
    import numpy as np

    return vector / np.linalg.norm(vector)


def test_the_tours_bank_figures_are_the_bundled_models():
    """The tour's cosines, and the pair the README gives where sentence shape outweighs the sense, recomputed."""
    import spacy

    readme = _page("README.md")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    river, money, lake, savings, boat = nlp.pipe(
        [
            "They sat on the bank of the river.",
            "The bank will approve your loan.",
            "Reeds grew along the bank of the lake.",
            "She took her savings to the bank.",
            "The boat drifted toward the muddy bank.",
        ]
    )
    bank = {doc: next(t for t in doc if t.text == "bank") for doc in (river, money, lake, savings, boat)}

    def top(a, b):  # the top LSTM layer's cosine of two docs' "bank"
        return float(_unit(a._.elmo_layers[2, bank[a].i]) @ _unit(b._.elmo_layers[2, bank[b].i]))

    mix = [bank[river].similarity(bank[money]), bank[river].similarity(bank[lake])]
    assert f"# (256,) {mix[0]:.3f} {mix[1]:.3f}\n" in readme
    assert f"# {top(river, money):.3f} {top(river, lake):.3f}\n" in readme
    assert top(river, money) < top(river, lake) and mix[0] < mix[1]  # what the tour shows: the senses apart,
    assert top(river, lake) - top(river, money) > mix[1] - mix[0]  # more so in the top layer than in the mix
    shape = (bank[savings].similarity(bank[boat]), bank[savings].similarity(bank[money]))
    shape_top = (top(savings, boat), top(savings, money))
    assert shape[0] > shape[1] and shape_top[0] > shape_top[1]  # the other sense closer, in both: as the README says
    said = " ".join(readme.split())
    assert (
        f"in the mix ({shape[0]:.3f} against {shape[1]:.3f}) and in the top layer ({shape_top[0]:.3f} against "
        f"{shape_top[1]:.3f})" in said
    )


def test_the_bundled_model_paragraph_quotes_its_files_and_its_card():
    import json

    from spacy_elmo.bilm.weights import parameter_count, read_options
    from spacy_elmo.sources.bundled_versions import DEFAULT_VERSION, MODELS_DIR
    from spacy_elmo.sources.published import PUBLISHED

    said = " ".join(_page("README.md").split())
    paragraph = said[said.index("**The bundled model**") :]
    folder = MODELS_DIR / "default"
    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    seen, record = 0, metrics
    while record and record.get("command"):
        seen, record = seen + record["words_seen"], record.get("init_from")
    test = metrics["test"]["wikitext-2/test.txt"]
    computed = [
        f"(`default`, now `{DEFAULT_VERSION}`)",
        f"a {parameter_count(read_options(folder / 'options.json')) / 1e6:.1f}M-parameter biLM",
        f"({(folder / 'weights.hdf5').stat().st_size / 1e6:.0f} MB;",
        f"on {seen / 1e6:.1f}M words seen of a {metrics['corpus']['words'] / 1e6:.1f}M-word corpus",
        f"perplexity {test['forward']:.1f} / {test['backward']:.1f}",
        f"({PUBLISHED['original'].parameters_m}M parameters, ~{PUBLISHED['original'].approx_mb} MB,",
    ]
    for text in computed:
        assert text in paragraph, text
    assert "It is for trying things out offline" in paragraph and "for real work, load a published model" in paragraph
    card = (folder / "README.md").read_text(encoding="utf-8").splitlines()
    for row, figures in [
        ("TREC-6, TF-IDF + ELMo mean", ("0.906", "p = 0.043", "0.884")),
        ("WNUT-17 entity F", ("0.294", "0.148")),
        ("SST-5 test accuracy (5,000 training sentences), mean / mean+max", ("0.348", "0.391")),
        ("SST-5, each layer's own mean+max row", ("0.363", "0.391")),
    ]:
        line = next(line for line in card if line.startswith(f"| {row}") or (row in line and line.startswith("|")))
        for figure in figures:
            assert figure in line and figure in paragraph, (row, figure)
    assert "gap +0.042, p = 0.043" in paragraph and "**+0.042 (0.043)**" in _page("benchmarks/RESULTS.md")


def test_each_classifier_figure_says_its_variant_as_results_md_has_it():
    """The README's TREC-6 and SST-5 accuracies name the vectorizer settings and the TF-IDF baseline they come from,
    as the rows of benchmarks/RESULTS.md do; docs/sklearn.md's example (another TF-IDF) says it is another one."""
    import inspect

    from spacy_elmo import ElmoVectorizer

    defaults = {name: p.default for name, p in inspect.signature(ElmoVectorizer).parameters.items()}
    assert (defaults["layers"], defaults["pooling"]) == ("average", "mean")  # what "ElmoVectorizer()'s defaults" are
    said = " ".join(_page("README.md").split())
    paragraph = said[said.index("**The bundled model**") :]
    results = _page("benchmarks/RESULTS.md")
    for readme_says, results_row in [
        ("TF-IDF + ELMo (`ElmoVectorizer()`'s defaults: the layer average, mean pooling) 0.906",
         "| TF-IDF + ELMo mean | v2 | **0.906** |"),
        ("TF-IDF's 0.884 (word 1-2-grams, C = 4;", "| TF-IDF + LR (C=4) | - | 0.884 |"),
        ("0.348 with `ElmoVectorizer()`'s defaults", "| ELMo mean | v2 | 0.348 |"),
        ('0.363 with every layer\'s pooled row side by side (`ElmoVectorizer(layers="all", pooling="mean+max")`)',
         "| ELMo per layer, mean+max | v2 | 0.363 |"),
        ("against 0.391", "| TF-IDF + LR (C=4) | - | 0.391 |"),
    ]:  # fmt: skip
        assert readme_says in paragraph, readme_says
        assert results_row in results, results_row
    sklearn_page = " ".join(_page("docs/sklearn.md").split())
    assert "LogisticRegression with C = 1 for every row, TF-IDF on word 1-2-grams" in sklearn_page
    assert "TF-IDF 0.854" in sklearn_page
    assert "(C = 4, words seen at least twice: 0.884 on TREC-6, 0.391" in sklearn_page


def test_the_readmes_batch_bound_is_the_tests():
    """The README's "float32 rounding" is the bound the batch, n_process and CPU tests hold (tests/numerics.py)."""
    from tests import numerics

    said = " ".join(_page("README.md").split())
    assert numerics.RTOL == numerics.SCALE_ATOL == 1e-5
    assert "equal to float32 rounding: within 1e-5 relative plus 1e-5 of the largest activation" in said


# -- the shell commands of the README and the guide ---------------------------------------------------------------
# Every command of a ```bash block is either run here, as written, in a fresh folder (offline, on the bundled model),
# or named below with why it is not. A new command must be put in one of the two.

SHELL_BLOCK = r"^[ \t]*```(?:bash|console|sh)\n(.*?)^[ \t]*```"  # indented ones too (in numbered steps)
SHELL_BLOCKS = [
    (page.relative_to(ROOT).as_posix(), textwrap.dedent(block))
    for page in PAGES
    for block in re.findall(
        r"^[ \t]*```(?:bash|console|sh)\n(.*?)^[ \t]*```", page.read_text(encoding="utf-8"), re.S | re.M
    )
]
NOT_RUN = {  # a command's start -> why no test runs it as written
    "python3 -m venv .venv": "makes a virtual environment and installs into it from the network (.ci/run does)",
    "allennlp elmo ": "AllenNLP's own command, shown for comparison",
    "spacy-elmo allennlp-elmo sentences.txt": "needs AllenNLP's default model, `original`, downloaded "
    "(tests/compat/test_compat_allennlp.py runs the command on the test model)",
    "SPACY_ELMO_HOME=/shared/elmo-cache": "downloads published models, or runs your own script",
    "spacy-elmo embed sentences.txt vectors.hdf5 --model my_elmo": "names a model of your own",
    "python -m spacy train ": "trains on your data for minutes (tests/spacy/test_spacy_training.py trains a pipeline)",
    "python examples/project/scripts/convert_": "converts your data files "
    "(tests/spacy/test_spacy_training.py runs both)",
    "spacy-elmo adapt ": "fine-tunes on your data (tests/spacy/test_spacy_adapt.py)",
    "spacy-elmo train ": "trains on your text (tests/train/test_train*.py)",
    "spacy-elmo evaluate ": "reads a model you trained (tests/train/test_train.py)",
    "spacy-elmo prepare-corpus ": "reads your corpus (tests/train/test_train_prepare.py)",
    "torchrun ": "starts training processes on your text (tests/train/test_distributed.py)",
    "python -m build ": "pip's build isolation downloads setuptools "
    "(tests/project/test_packaging.py builds without it)",
    "pip install ": "installs packages",
    ".venv/bin/pip install ": "installs packages into the Quick start's environment",
    "python benchmarks/gpu_check.py ": "needs a CUDA device "
    "(tests/benchmarks/test_gpu_check.py runs its CPU smoke run)",
}
RUN_STARTS = (  # commands run as written, in page order, in one fresh folder per page
    "printf ",
    ".venv/bin/spacy-elmo ",
    "spacy-elmo embed sentences.txt vectors.hdf5",
    "spacy-elmo similarity ",
    "spacy-elmo info",
    "spacy-elmo export default elmo-onnx",
    "python -m spacy assemble examples/config.cfg ",
    'python -c "import spacy; ',
    "mkdir -p packages",
    "python -m spacy package out/model-best packages ",
)
# what the run commands read that the reader brings: a text file, and the pipeline the guide's training steps make
# (here the example config assembled, which `spacy package` packages the same way)
SENTENCES = "They sat on the bank of the river .\nThe bank will approve your loan .\n"
# The README's commands follow its Quick start and bring nothing else: they run in a checkout with the Quick start's
# `.venv` (`pip install -e .`: no extras, not activated) and no sentences.txt.
AFTER_QUICK_START = {"README.md"}
EXTRAS_MODULES = ("matplotlib", "dask", "distributed", "dask_ml")  # the [plot] and [dask] extras' imports


def _shell_commands(block: str) -> list[str]:
    """A block's commands: continuation lines joined, comment lines and a leading ``$ `` prompt dropped."""
    lines = re.sub(r"\\\n\s*", " ", block).splitlines()
    return [line.strip().removeprefix("$ ") for line in lines if line.strip() and not line.strip().startswith("#")]


def _shell_runs(page: str) -> list[str]:
    commands = [c for p, block in SHELL_BLOCKS if p == page for c in _shell_commands(block)]
    return [c for c in commands if not c.startswith(tuple(NOT_RUN)) and c.startswith(RUN_STARTS)]


def test_every_shell_command_is_run_or_says_why_not():
    commands = [(page, c) for page, block in SHELL_BLOCKS for c in _shell_commands(block)]
    assert len(commands) >= 30
    unclassified = [(p, c) for p, c in commands if not c.startswith((*NOT_RUN, *RUN_STARTS))]
    assert not unclassified, (
        f"run these in test_shell_commands_run_as_written or say in NOT_RUN why not: {unclassified}"
    )
    assert {p for p, c in commands if c.startswith(RUN_STARTS)} >= {"README.md", "docs/spacy.md", "docs/training.md"}


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted({p for p, _ in SHELL_BLOCKS if _shell_runs(p)}))
def test_shell_commands_run_as_written(page, tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    runs = _shell_runs(page)
    if any("out/model-best" in command for command in runs):
        import spacy

        config = spacy.util.load_config(ROOT / "examples" / "config.cfg")
        (tmp_path / "out").mkdir()
        spacy.util.load_model_from_config(config, auto_fill=True).to_disk(tmp_path / "out" / "model-best")
    bin_dir = os.path.dirname(sys.executable)  # this environment's python, spacy-elmo and spacy commands first
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    python_path = [str(ROOT), os.environ.get("PYTHONPATH")]
    if page in AFTER_QUICK_START:  # not activated: only .venv/bin/... finds this environment's commands
        path = [d for d in path if Path(d).resolve() != Path(bin_dir).resolve()]
        python_path.insert(0, str(_quick_start_venv(tmp_path)))
    else:
        (tmp_path / "sentences.txt").write_text(SENTENCES, encoding="utf-8")
        path.insert(0, bin_dir)
    env = {
        **os.environ,
        "PATH": os.pathsep.join(path),
        "PYTHONPATH": os.pathsep.join(filter(None, python_path)),
        "SPACY_ELMO_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    for command in runs:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, f"{page}: {command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def _quick_start_venv(folder: Path) -> Path:
    """The Quick start's ``.venv`` in ``folder``: its ``python`` and ``spacy-elmo`` are this environment's, with the
    extras' modules hidden (``pip install -e .`` installs none). Returns the folder that hides them, for PYTHONPATH."""
    import shlex
    import sys

    bin_dir = folder / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = shlex.quote(sys.executable)
    for name, command in (("python", python), ("spacy-elmo", f"{python} -m spacy_elmo")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n', encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    hidden = folder / ".venv" / "without-extras"
    for module in EXTRAS_MODULES:
        (hidden / module).mkdir(parents=True)
        (hidden / module / "__init__.py").write_text(
            f"raise ImportError('{module} is not installed: the Quick start installs no extras')\n", encoding="utf-8"
        )
    return hidden


def test_install_lines_work_from_a_checkout():
    """spacy-elmo is not on PyPI yet: an install line names the checkout (`pip install -e ".[extra]"`, with an
    extra pyproject.toml has), and one naming the published distribution says it is for once it is there."""
    extras = set(re.findall(r"^(\w+) = \[", _page("pyproject.toml").split("[project.optional-dependencies]")[1], re.M))
    assert {"dask", "plot", "docs", "test"} <= extras
    for page in PAGES:
        said = " ".join(page.read_text(encoding="utf-8").split())
        for extra in re.findall(r"pip install -e \"\.\[(\w+)\]\"", said):
            assert extra in extras, (page.name, extra)
        for published in re.finditer(r"pip install ['\"]?spacy-elmo\b", said):
            before = said[max(0, published.start() - 40) : published.start()]
            assert "once spacy-elmo is on PyPI" in before, (
                page.name,
                said[published.start() - 40 : published.end() + 10],
            )


def test_the_torch_install_note_says_which_build_pip_gets():
    """Pinning torch does not keep pip from a CUDA build: PyPI's Linux torch is one. Every page with the install
    command says so and gives PyTorch's CPU-only index."""
    pages = [page for page in PAGES if "pip install torch==2.13.0" in page.read_text(encoding="utf-8")]
    assert {page.name for page in pages} >= {"README.md", "index.md", "contributing.md"}
    for page in pages:
        said = " ".join(page.read_text(encoding="utf-8").split())
        assert "On Linux, torch from PyPI is a CUDA build" in said, page.name
        assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in said, page.name
        assert "does not pull" not in said and "is installed first because" not in said, page.name


def test_gpu_support_is_said_to_be_unmeasured_while_results_has_no_gpu_run():
    """While benchmarks/RESULTS.md records no GPU run, the README and the training guide say so once, plainly, and
    name no GPU a run was made on."""
    gpu_section = _page("benchmarks/RESULTS.md").split("\n## GPU\n", 1)[1].split("\n#", 1)[0]
    assert "No GPU figures" in gpu_section  # when a GPU run is recorded, say what it measured instead
    for name in ("README.md", "docs/training.md"):
        said = " ".join(_page(name).split())
        assert said.count("no GPU run is recorded yet") + said.count("No GPU run is recorded yet") == 1, name
        assert "NVIDIA H200)" not in said and "checks it on the GPU it runs on" not in said, name


def test_what_default_names_is_said_as_it_is():
    """Where the README or the guide says which version "default" is, it is the one the package names."""
    from spacy_elmo.sources.bundled_versions import DEFAULT_VERSION

    said = [(page.name, " ".join(page.read_text(encoding="utf-8").split())) for page in PAGES]
    claim = re.compile(r'`"?default"?`,? (?:is|\(now|now|\(and its version name) `(default-v\d+)`')
    claims = [(name, version) for name, text in said for version in claim.findall(text)]
    assert len(claims) >= 3, claims  # README, cli.md, models.md
    assert all(version == DEFAULT_VERSION for _, version in claims), claims
