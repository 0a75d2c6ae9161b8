"""`spacy train` with the shipped configs, entry points, `spacy debug config`, and the example project's scripts."""

import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from spacy.tokens import Doc, DocBin

from spacy_elmo import load_bilm
from spacy_elmo.spacy import learned_mix

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted((EXAMPLES / "configs").glob("*.cfg"))
SCRIPTS = EXAMPLES / "project" / "scripts"
TEXTS = [
    ("The bank approved the loan .", "MONEY"),
    ("I paid cash at the bank .", "MONEY"),
    ("The loan has a high rate .", "MONEY"),
    ("Apple lent money to Google .", "MONEY"),
    ("Interest rates rose in Paris .", "MONEY"),
    ("She deposited a cheque .", "MONEY"),
    ("We sat by the river bank .", "RIVER"),
    ("The river was cold and wide .", "RIVER"),
    ("Fish swim in the river .", "RIVER"),
    ("The Thames flows through London .", "RIVER"),
    ("Boats drift down the stream .", "RIVER"),
    ("Water ran over the stones .", "RIVER"),
]
PLACES = {"Paris", "Google", "Apple", "London", "Thames"}


def write_corpus(path: Path, task: str) -> Path:
    """A dozen docs with cats (textcat) or entities (ner)."""
    vocab = spacy.blank("en").vocab
    docs = []
    for text, cat in TEXTS:
        words = text.split()
        doc = Doc(vocab, words=words, ents=[("B-ORG" if w in PLACES else "O") for w in words])
        doc.cats = {"MONEY": float(cat == "MONEY"), "RIVER": float(cat == "RIVER")}
        docs.append(doc)
    DocBin(docs=docs).to_disk(path)
    return path


def spacy_train(config: Path, fixture_dir: Path, tmp_path: Path, component: str, max_steps: int):
    """``spacy train`` of ``config`` on a dozen docs (:func:`write_corpus`, also its dev set) over the fixture model,
    at learn rate 0.01 and evaluating twice, into tmp_path/out: the model-last it saves, loaded."""
    from spacy.cli.train import train

    corpus = write_corpus(tmp_path / "data.spacy", component)
    overrides = {
        "paths.train": str(corpus),
        "paths.dev": str(corpus),
        "paths.elmo": str(fixture_dir),
        "training.max_steps": max_steps,
        "training.eval_frequency": max_steps // 2,
        "training.optimizer.learn_rate": 0.01,
    }
    train(config, tmp_path / "out", overrides=overrides)
    return spacy.load(tmp_path / "out" / "model-last")


@pytest.fixture
def fixture_backend_cache(fixture_dir):
    """The configs resize the shared fixture backend's cache: put it back for the other tests."""
    backend = load_bilm(fixture_dir)
    before = backend.memory_cache.max_mb
    yield
    backend.configure_cache(cache_mb=before)


@pytest.mark.slow
@pytest.mark.parametrize("name,component", [("textcat_elmo", "textcat"), ("ner_elmo_tok2vec", "ner")])
def test_spacy_train_shipped_config_on_the_fixture_model(fixture_dir, tmp_path, fixture_backend_cache, name, component):
    """spacy.cli.train on a shipped config: no width / n_layers anywhere, the mix trains and is saved."""
    config = EXAMPLES / "configs" / f"{name}.cfg"
    assert "width = 1024" not in config.read_text() and "n_layers" not in config.read_text()
    nlp = spacy_train(config, fixture_dir, tmp_path, component, max_steps=12)
    assert nlp.pipe_names == ["elmo", component]
    assert nlp.get_pipe("elmo").listening_components == [component]
    mix = learned_mix(nlp.get_pipe(component))
    assert len(mix.weights) == 3 and max(abs(w - 1 / 3) for w in mix.weights) > 1e-5 and mix.gamma != 1.0
    doc = nlp("The bank approved the loan .")
    if component == "textcat":
        assert sum(doc.cats.values()) == pytest.approx(1.0, abs=1e-5)
    assert doc._.elmo_layers.shape == (3, 6, 32)
    if component == "textcat":  # the learned-mix figure from the CLI, with the numbers it read
        from typer.testing import CliRunner

        from spacy_elmo.cli import app

        result = CliRunner().invoke(app, ["plot-mix", str(tmp_path / "out" / "model-last"), str(tmp_path / "mix.png")])
        assert result.exit_code == 0, result.output
        assert f"textcat: weights {' / '.join(f'{w:.3f}' for w in mix.weights)}, gamma {mix.gamma:.3f}" in result.output
        assert (tmp_path / "mix.png").read_bytes().startswith(b"\x89PNG")


def test_architectures_resolve_in_a_fresh_process():
    """The spacy_architectures / spacy_misc entry points: no `import spacy_elmo` needed first."""
    code = (
        "import sys, spacy\n"
        "from thinc.api import Config\n"
        'cfg = Config().from_str(\'[mix]\\n@architectures = "spacy_elmo.ElmoScalarMix.v2"\\n'
        '[old]\\n@architectures = "spacy_elmo.ElmoScalarMix.v1"\\nwidth = 32\\nn_layers = 2\\n'
        '[tuned]\\n@architectures = "spacy_elmo.ElmoFineTune.v1"\\ntrainable = "lstm"\\n'
        '[model]\\n@misc = "spacy_elmo.ElmoBiLM.v1"\\n'
        '[positions]\\n@misc = "spacy_elmo.sentence_positions.v1"\\n\')\n'
        "assert 'spacy_elmo' not in sys.modules\n"
        "r = spacy.registry.resolve(cfg)\n"
        "print(r['mix'].name, r['old'].get_dim('nO'), r['model'].path, r['positions'].__name__)\n"
        "print(r['tuned'].name, r['tuned'].attrs['trainable'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["elmo_scalar_mix", "32", "default", "sentence_positions", "elmo_fine_tune", "lstm"]


@pytest.mark.parametrize("config", [EXAMPLES / "config.cfg", *CONFIGS], ids=lambda p: p.name)
def test_shipped_configs_pass_debug_config(config, capsys):
    from spacy.cli.debug_config import debug_config

    assert len(CONFIGS) == 10
    debug_config(
        config, overrides={"paths.train": "train.spacy", "paths.dev": "dev.spacy"}
    )  # exits on an invalid config
    assert "Config is valid" in capsys.readouterr().out


def test_project_conversion_scripts(data_dir, tmp_path, monkeypatch):
    """The project's converters on the first lines of SST-5 and WNUT-17 (and a bad line named)."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import convert_ner
    import convert_textcat

    sst = tmp_path / "sst.txt"
    sst.write_text("".join((data_dir / "sst" / "sst5_flat" / "sst_dev.txt").open(encoding="utf-8").readlines()[:20]))
    convert_textcat.main(sst, tmp_path / "sst.spacy", limit=8, seed=0, labels="1,2,3,4,5")
    docs = list(DocBin().from_disk(tmp_path / "sst.spacy").get_docs(spacy.blank("en").vocab))
    assert len(docs) == 8 and all(sorted(d.cats.values()) == [0, 0, 0, 0, 1] for d in docs)
    assert set(docs[0].cats) == {"1", "2", "3", "4", "5"}

    conll = tmp_path / "wnut.conll"
    lines = (data_dir / "ner" / "wnut17" / "wnut17train.conll").read_text(encoding="utf-8").splitlines()[:200]
    conll.write_text("\n".join(lines) + "\n", encoding="utf-8")
    convert_ner.main(conll, tmp_path / "wnut.spacy", limit=0, seed=0)
    docs = list(DocBin().from_disk(tmp_path / "wnut.spacy").get_docs(spacy.blank("en").vocab))
    assert [t.text for t in docs[0]][:3] == ["@paulwalk", "It", "'s"]  # sentences split at the "\t"-only lines
    assert [(e.text, e.label_) for e in docs[0].ents] == [("Empire State Building", "location"), ("ESB", "location")]
    assert sum(len(d) for d in docs) == sum(1 for line in lines if line.strip())

    (tmp_path / "bad.txt").write_text("__label__1\tfine\nno label here\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: expected '__label__X<TAB>text'"):
        convert_textcat.main(tmp_path / "bad.txt", tmp_path / "bad.spacy", limit=0, seed=0, labels=None)


def test_project_converters_without_data_say_how_to_get_it(tmp_path, monkeypatch):
    """No corpus where the `data` variable points: a message naming `spacy project assets` and `data`, no traceback."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import convert_ner
    import convert_textcat

    for convert in (convert_textcat.main, convert_ner.main):
        with pytest.raises(SystemExit) as stopped:
            convert(tmp_path / "nowhere" / "train.txt", tmp_path / "out.spacy", limit=0, seed=0)
        message = str(stopped.value.code)
        assert "nowhere/train.txt: no such file" in message and "`data` variable" in message
        assert "python -m spacy project assets ." in message and "--vars.data DIR" in message
    assert not (tmp_path / "out.spacy").exists()


@pytest.mark.slow
def test_the_project_run_without_data_ends_in_that_message(tmp_path):
    """`spacy project run convert` on a copy of the project whose default `data` folder does not exist."""
    import shutil

    import srsly

    project = tmp_path / "project"  # its default `data` folder, assets/, is one a run writes: not copied
    # the project as cloned: without what a run of it wrote here (its outputs would make `convert` a no-op)
    written = srsly.read_yaml(EXAMPLES / "project" / "project.yml")["directories"]
    ignore = shutil.ignore_patterns("__pycache__", "project.lock", *written)
    shutil.copytree(EXAMPLES / "project", project, ignore=ignore)
    run = subprocess.run(
        [sys.executable, "-m", "spacy", "project", "run", "convert", str(project)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0
    assert "Traceback" not in run.stderr, run.stderr
    assert "spacy project assets" in run.stderr and "`data` variable" in run.stderr, run.stderr


def test_project_accuracy_is_top_category_agreement(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    from evaluate import accuracy
    from spacy.training import Example

    nlp = spacy.blank("en")
    examples = []
    for gold, predicted in (("1", "1"), ("2", "1"), ("3", "3")):
        eg = Example.from_dict(nlp.make_doc("a b"), {"cats": {k: float(k == gold) for k in "123"}})
        eg.predicted.cats = {k: (0.8 if k == predicted else 0.1) for k in "123"}
        examples.append(eg)
    assert accuracy(examples) == pytest.approx(2 / 3)


@pytest.mark.parametrize("config", [EXAMPLES / "config.cfg", *CONFIGS], ids=lambda p: p.name)
def test_shipped_configs_are_already_filled(config, tmp_path):
    """`spacy init fill-config` has nothing to add (e.g. the elmo component's dtype and get_positions)."""
    from spacy.cli.init_config import fill_config

    shipped, filled = fill_config(tmp_path / "filled.cfg", config, silent=True)
    assert dict(filled) == dict(shipped)  # the settings and values; spaCy 3.7 writes a section's keys sorted
