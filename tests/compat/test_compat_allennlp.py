"""spacy_elmo.compat.allennlp against AllenNLP 0.9.0's own outputs and the fixture's stateful reference activations.

The AllenNLP numbers in tests/fixtures/allennlp_compat/ come from AllenNLP's unmodified code
(tests/fixtures/make_allennlp_compat_refs.py, run in the peer venv); the inputs are in its
cases.json. Two models: the AllenNLP test biLM (compared at 1e-6, as tests/bilm/test_parity.py) and
random weights of a published-size architecture (regenerated here from the script's seed;
compared relative to the activation scale, tests/numerics.py).
"""

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.compat import allennlp as compat
from spacy_elmo.compat.allennlp import (
    ConfigurationError,
    Elmo,
    ElmoEmbedder,
    ElmoTokenEmbedder,
    _ElmoBiLm,
    _ElmoCharacterEncoder,
    batch_to_ids,
    remove_sentence_boundaries,
)
from tests.conftest import torch_threads
from tests.numerics import assert_recomputed_close

REFS = Path(__file__).resolve().parents[1] / "fixtures" / "allennlp_compat"
MANIFEST = json.loads((REFS / "cases.json").read_text(encoding="utf-8"))
MODELS = ["fixture", "random"]


def _script():
    spec = importlib.util.spec_from_file_location("make_refs", REFS.parent / "make_allennlp_compat_refs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = _script()
# the training cases run AllenNLP's dropout: they compare only where this torch draws the references' masks
same_dropout_masks = pytest.mark.skipif(
    SCRIPT.dropout_masks_sha256() != MANIFEST["dropout_masks_sha256"],
    reason=f"this torch ({torch.__version__}) draws other dropout masks than the references' ({MANIFEST['torch']})",
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread, as the references were made (small work; also faster on a shared machine)."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def random_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("random_elmo")
    (folder / "options.json").write_text(json.dumps(MANIFEST["random_options"]))
    sha = SCRIPT.write_random_weights(folder / "weights.hdf5", MANIFEST["random_options"], MANIFEST["random_seed"])
    assert sha == MANIFEST["random_weights_data_sha256"], "the random weights differ from the ones AllenNLP ran"
    return folder / "options.json", folder / "weights.hdf5"


@pytest.fixture(scope="module", params=MODELS)
def model(request, fixture_dir, random_files):
    """(name, options, weights, cases, refs) for one model."""
    name = request.param
    files = (fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5") if name == "fixture" else random_files
    refs = dict(np.load(REFS / f"refs_{name}.npz"))
    return name, files[0], files[1], MANIFEST["cases"][name], refs


def close(name, ours, expected, model_name, what="", gradient=False):
    """AllenNLP's number to float32 rounding: 1e-6 on the fixture (as test_parity), else relative to the scale.

    Gradients sum a token's contributions over the batch in another order than AllenNLP's, so
    they are compared relative to their scale on both models (tests/numerics.py's rule).
    """
    ours = ours.detach().cpu().numpy() if hasattr(ours, "detach") else np.asarray(ours)
    expected = np.asarray(expected)
    assert ours.shape == expected.shape, f"{what}: shape {ours.shape} vs AllenNLP's {expected.shape}"
    diff = float(np.abs(ours.astype(np.float64) - expected).max(initial=0.0))
    scale = float(np.abs(expected).max(initial=0.0))
    print(f"[{model_name}] {name} {what}: max abs diff {diff:.3g} (scale {scale:.3g})")
    if model_name == "fixture" and not gradient:
        np.testing.assert_allclose(ours, expected, atol=1e-6, rtol=1e-5, err_msg=what)
    else:
        assert_recomputed_close(ours, expected, err_msg=what)


def test_batch_to_ids_equals_allennlps(model):
    _name, _, _, cases, refs = model
    ids = batch_to_ids(cases["tricky"])
    assert ids.dtype == torch.int64
    np.testing.assert_array_equal(ids.numpy(), refs["batch_to_ids"])


def test_character_encoder(model):
    name, options, weights, cases, refs = model
    encoder = _ElmoCharacterEncoder(options, weights)
    with torch.no_grad():
        out = encoder(batch_to_ids(cases["vocab_rows"]))
    assert out["mask"].dtype == torch.int64
    np.testing.assert_array_equal(out["mask"].numpy(), refs["char_encoder/mask"])
    close(
        "_ElmoCharacterEncoder", out["token_embedding"], refs["char_encoder/token_embedding"], name, "token_embedding"
    )
    assert encoder.get_output_dim() == refs["char_encoder/token_embedding"].shape[-1]


def replay(bilm, sequence):
    """Run ``sequence`` (batches and reset steps) through ``bilm``; yields each call's output and carried states."""
    for step in sequence:
        if step == "reset":
            bilm._elmo_lstm.reset_states()
        elif isinstance(step, str):
            bilm._elmo_lstm.reset_states(torch.tensor([int(x) for x in step.split(":")[1].split(",")]))
        else:
            with torch.no_grad():
                yield bilm(batch_to_ids(step)), bilm._elmo_lstm._states


def test_bilm_carries_state_as_allennlp_does(model):
    """Batches that grow (new rows start from zero), shrink (the rest kept), part-reset and reset."""
    name, options, weights, cases, refs = model
    bilm = _ElmoBiLm(options, weights)
    bilm.eval()
    calls = list(replay(bilm, cases["sequence"]))
    assert len(calls) == 5
    for call, (out, (h, c)) in enumerate(calls):
        assert len(out["activations"]) == bilm.num_layers == 3
        np.testing.assert_array_equal(out["mask"].numpy(), refs[f"sequence/{call}/mask"])
        for k, layer in enumerate(out["activations"]):
            close("_ElmoBiLm", layer, refs[f"sequence/{call}/activations/{k}"], name, f"call {call} layer {k}")
        close("_ElmoBiLm", h, refs[f"sequence/{call}/states/h"], name, f"call {call} state h")
        close("_ElmoBiLm", c, refs[f"sequence/{call}/states/c"], name, f"call {call} state c")


def test_elmo_eval_two_representations(model):
    name, options, weights, cases, refs = model
    elmo = Elmo(options, weights, 2)
    elmo.eval()
    for call, batch in enumerate([cases["b1"], cases["b2"]]):
        with torch.no_grad():
            out = elmo(batch_to_ids(batch))
        assert len(out["elmo_representations"]) == 2
        np.testing.assert_array_equal(out["mask"].numpy(), refs[f"elmo_eval/{call}/mask"])
        for k in range(2):
            close(
                "Elmo", out["elmo_representations"][k], refs[f"elmo_eval/{call}/{k}"], name, f"eval call {call} rep {k}"
            )


def test_elmo_fixed_mix_layer_norm_boundaries_kept(model):
    name, options, weights, cases, refs = model
    elmo = Elmo(
        options, weights, 1, do_layer_norm=True, keep_sentence_boundaries=True, scalar_mix_parameters=[-1.0, 0.5, 2.0]
    )
    elmo.eval()
    assert not any(p.requires_grad for p in elmo.parameters())
    with torch.no_grad():
        out = elmo(batch_to_ids(cases["b4"]))
    np.testing.assert_array_equal(out["mask"].numpy(), refs["elmo_fixed/mask"])
    close("Elmo", out["elmo_representations"][0], refs["elmo_fixed/0"], name, "fixed mix, layer norm, boundaries")


def test_elmo_four_dimensional_input(model):
    name, options, weights, cases, refs = model
    elmo = Elmo(options, weights, 1)
    elmo.eval()
    ids = batch_to_ids(cases["b4"])
    with torch.no_grad():
        out = elmo(ids.view(2, 2, *ids.shape[1:]))
    assert out["mask"].shape == ids.view(2, 2, *ids.shape[1:]).shape[:-1]
    np.testing.assert_array_equal(out["mask"].numpy(), refs["elmo_4d/mask"])
    close("Elmo", out["elmo_representations"][0], refs["elmo_4d/0"], name, "4-D input")


@same_dropout_masks
@pytest.mark.parametrize("requires_grad", [True, False], ids=["fine-tuned", "frozen"])
def test_elmo_training_steps_and_gradients(model, requires_grad):
    """train(): dropout active (same seed, same masks as AllenNLP), two steps with the state carried, every gradient."""
    name, options, weights, cases, refs = model
    key = "elmo_train" if requires_grad else "elmo_train_frozen"
    elmo = Elmo(options, weights, 2, requires_grad=requires_grad, do_layer_norm=requires_grad)
    elmo.train()
    bilm_parameters = [n for n, p in elmo.named_parameters() if n.startswith("_elmo_lstm.")]
    assert all(p.requires_grad == requires_grad for n, p in elmo.named_parameters() if n in bilm_parameters)
    for call, batch in enumerate([cases["b1"], cases["b3"]]):
        elmo.zero_grad()
        torch.manual_seed(1000 + call)
        out = elmo(batch_to_ids(batch))
        reps = out["elmo_representations"]
        rng = np.random.default_rng(call)
        loss_weights = [torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32)) for x in reps]
        sum((x * w).sum() for x, w in zip(reps, loss_weights)).backward()
        for k in range(2):
            close("Elmo", reps[k], refs[f"{key}/{call}/{k}"], name, f"{key} call {call} rep {k}")
        check_gradients(elmo, refs, f"{key}/{call}/grad/", name, f"{key} call {call}", mixes=2)
        assert (
            any(n.startswith("_elmo_lstm.") and p.grad is not None for n, p in elmo.named_parameters()) == requires_grad
        )


def check_gradients(module, refs, prefix, model_name, what, mixes=0, extra=None):
    """Every parameter gradient of ``module`` against AllenNLP's (in this package's layout; sampled where large)."""
    expected_names = {k[len(prefix) :] for k in refs if k.startswith(prefix) and not k.endswith(("/sum", "/norm"))}
    ours = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    assert set(ours) == expected_names and ours
    for k in range(mixes):  # a mix's 4 one-number gradients, each a sum over the batch: compared at their common scale
        mix = [f"scalar_mix_{k}.gamma"] + [f"scalar_mix_{k}.scalar_parameters.{i}" for i in range(3)]
        got = np.concatenate([ours.pop(n).reshape(-1).numpy() for n in mix])
        close("grad", got, np.concatenate([refs[prefix + n] for n in mix]), model_name, f"{what} d/d mix {k}", True)
    for parameter_name, grad in ours.items():
        flat = grad.detach().reshape(-1).numpy()
        if flat.size > SCRIPT.MAX_STORED:
            flat = flat[SCRIPT.sampled_positions(parameter_name, flat.size)]
        close("grad", flat, refs[prefix + parameter_name], model_name, f"{what} d/d {parameter_name}", True)
        norm = float(grad.double().norm())
        assert norm == pytest.approx(float(refs[prefix + parameter_name + "/norm"]), rel=1e-4, abs=1e-7)


def test_bilm_and_char_encoder_gradients_in_eval_mode(model):
    name, options, weights, cases, refs = model
    bilm = _ElmoBiLm(options, weights, requires_grad=True)
    bilm.eval()
    for call, batch in enumerate([cases["b1"], cases["b3"]]):
        bilm.zero_grad()
        out = bilm(batch_to_ids(batch))
        rng = np.random.default_rng(20 + call)
        loss = sum(
            (x * torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))).sum() for x in out["activations"]
        )
        loss.backward()
        for k, layer in enumerate(out["activations"]):
            close(
                "_ElmoBiLm", layer, refs[f"bilm_grad/{call}/activations/{k}"], name, f"with grad, call {call} layer {k}"
            )
        check_gradients(bilm, refs, f"bilm_grad/{call}/grad/", name, f"_ElmoBiLm call {call}")
    encoder = _ElmoCharacterEncoder(options, weights, requires_grad=True)
    out = encoder(batch_to_ids(cases["b4"]))
    loss_weights = torch.from_numpy(
        np.random.default_rng(30).standard_normal(out["token_embedding"].shape).astype(np.float32)
    )
    (out["token_embedding"] * loss_weights * out["mask"].unsqueeze(-1).float()).sum().backward()
    close("_ElmoCharacterEncoder", out["token_embedding"], refs["char_encoder_grad/token_embedding"], name, "with grad")
    check_gradients(encoder, refs, "char_encoder_grad/grad/", name, "_ElmoCharacterEncoder")


@same_dropout_masks
def test_a_typical_training_script_trains_as_with_allennlp(model):
    """The script that ran on AllenNLP (Elmo + classifier, Adam, four steps, dropout, state carried), on this
    package."""
    name, options, weights, cases, refs = model
    start = (refs["training_loop/classifier/weight"], refs["training_loop/classifier/bias"])
    result = SCRIPT.typical_training_script(Elmo, batch_to_ids, options, weights, cases, classifier_init=start)
    losses = result["losses"]
    close("training loop", losses, refs["training_loop/losses"], name, "losses")
    assert len(set(np.round(losses, 4))) == len(losses)  # the weights moved between steps
    for key in ("scalar_parameters", "gamma", "classifier_weight"):
        close("training loop", result[f"final/{key}"], refs[f"training_loop/final/{key}"], name, f"final {key}", True)


def test_vocab_to_cache_and_its_char_cnn_fallback(model):
    name, options, weights, cases, refs = model
    ids = batch_to_ids(cases["b1"])
    word_ids = torch.from_numpy(refs["vocab_cache/word_ids"])
    elmo = Elmo(options, weights, 1, vocab_to_cache=cases["vocab"])
    elmo.eval()
    with torch.no_grad():
        out = elmo(ids, word_ids)
    np.testing.assert_array_equal(out["mask"].numpy(), refs["vocab_cache/mask"])
    close("Elmo vocab_to_cache", out["elmo_representations"][0], refs["vocab_cache/0"], name, "cached word ids")
    # an id outside the cached vocabulary: the char CNN runs on the char ids instead (AllenNLP's fallback)
    elmo = Elmo(options, weights, 1, vocab_to_cache=cases["vocab"])
    elmo.eval()
    outside = word_ids.clone()
    outside[0, 0] = len(cases["vocab"]) + 5
    with torch.no_grad():
        out = elmo(ids, outside)
    close("Elmo vocab_to_cache", out["elmo_representations"][0], refs["vocab_cache/char_path/0"], name, "fallback")


def test_token_embedder_with_projection(model):
    name, options, weights, cases, refs = model
    embedder = ElmoTokenEmbedder(options, weights, projection_dim=7)
    embedder.eval()
    assert embedder.get_output_dim() == 7
    with torch.no_grad():
        embedder._projection.weight.copy_(torch.from_numpy(refs["token_embedder/projection/weight"]))
        embedder._projection.bias.copy_(torch.from_numpy(refs["token_embedder/projection/bias"]))
    ids = batch_to_ids(cases["b4"])
    with torch.no_grad():
        close("ElmoTokenEmbedder", embedder(ids), refs["token_embedder/3d"], name, "3-D")
        close("ElmoTokenEmbedder", embedder(ids.view(2, 2, *ids.shape[1:])), refs["token_embedder/4d"], name, "4-D")


@same_dropout_masks
def test_token_embedder_fine_tuned_in_train_mode(model):
    name, options, weights, cases, refs = model
    embedder = ElmoTokenEmbedder(options, weights, projection_dim=5, requires_grad=True)
    embedder.train()
    with torch.no_grad():
        embedder._projection.weight.copy_(torch.from_numpy(refs["token_embedder_train/projection/weight"]))
        embedder._projection.bias.copy_(torch.from_numpy(refs["token_embedder_train/projection/bias"]))
    torch.manual_seed(9)
    out = embedder(batch_to_ids(cases["b1"]))
    (out * torch.from_numpy(np.random.default_rng(5).standard_normal(out.shape).astype(np.float32))).sum().backward()
    close("ElmoTokenEmbedder", out, refs["token_embedder_train/out"], name, "train, dropout")
    for part in ("weight", "bias"):
        grad = getattr(embedder._projection, part).grad.reshape(-1)
        close(
            "ElmoTokenEmbedder grad",
            grad,
            refs[f"token_embedder_train/projection_grad/{part}"].reshape(-1),
            name,
            part,
            True,
        )
    check_gradients(embedder._elmo, refs, "token_embedder_train/grad/", name, "ElmoTokenEmbedder", mixes=1)


def test_elmo_embedder_methods(model):
    name, options, weights, cases, refs = model
    embedder = ElmoEmbedder(options, weights)
    one = embedder.embed_sentence(cases["b1"][0])
    assert one.dtype == np.float32
    close("ElmoEmbedder.embed_sentence", one, refs["embedder/embed_sentence"], name)
    batch = embedder.embed_batch(cases["b2"])
    assert len(batch) == len(cases["b2"])
    dim = refs["embedder/embed_sentence"].shape[-1]
    for i, array in enumerate(batch):
        if not cases["b2"][i]:  # AllenNLP's empty sentence: float64 (3, 0, 1024) whatever the model; here the model's
            assert array.shape == (3, 0, dim) and array.dtype == np.float32
            assert refs[f"embedder/embed_batch/{i}"].shape[:2] == (3, 0)
            continue
        close("ElmoEmbedder.embed_batch", array, refs[f"embedder/embed_batch/{i}"], name, f"sentence {i}")
    generator = embedder.embed_sentences(cases["embed_sentences"], batch_size=3)
    assert not isinstance(generator, list)
    for i, array in enumerate(generator):
        close("ElmoEmbedder.embed_sentences", array, refs[f"embedder/embed_sentences/{i}"], name, f"sentence {i}")
    activations, mask = embedder.batch_to_embeddings(cases["b3"])
    np.testing.assert_array_equal(mask.numpy(), refs["embedder/batch_to_embeddings/mask"])
    close("ElmoEmbedder.batch_to_embeddings", activations, refs["embedder/batch_to_embeddings/activations"], name)
    empty = embedder.embed_sentence([])
    assert empty.shape == (3, 0, dim) and empty.dtype == np.float32


def _hdf5(path):
    with h5py.File(path, "r") as f:
        return {k: (json.loads(f[k][0]) if k == "sentence_to_index" else f[k][...]) for k in f}


def _check_file(got, refs, prefix, name):
    expected_keys = {k[len(prefix) :] for k in refs if k.startswith(prefix)}
    assert set(got) == expected_keys
    for key, value in got.items():
        if key == "sentence_to_index":
            assert value == json.loads(str(refs[prefix + key]))
        else:
            assert value.dtype == np.float32
            close("embed_file", value, refs[prefix + key], name, f"{prefix}{key}")


@pytest.mark.parametrize("output_format", ["all", "top", "average"])
def test_embed_file_layout_and_numbers(model, tmp_path, output_format):
    name, options, weights, cases, refs = model
    source = tmp_path / "in.txt"
    source.write_text("\n".join(cases["lines"]) + "\n", encoding="utf-8")
    target = tmp_path / "out.hdf5"
    with torch.no_grad(), open(source, encoding="utf-8") as handle:
        ElmoEmbedder(options, weights).embed_file(handle, str(target), output_format, batch_size=2)
    _check_file(_hdf5(target), refs, f"embed_file/{output_format}/", name)
    assert len(cases["lines"]) != len(set(cases["lines"]))  # a repeated line keeps its own dataset


def test_command_line_three_ways(fixture_dir, tmp_path, monkeypatch):
    refs = dict(np.load(REFS / "refs_fixture.npz"))
    cases = MANIFEST["cases"]["fixture"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(cases["lines"]) + "\n", encoding="utf-8")
    files = ["--options-file", str(fixture_dir / "options.json"), "--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    args = [
        str(source),
        str(tmp_path / "a.hdf5"),
        "--top",
        "--batch-size",
        "2",
        *files,
        "--vocab-path",
        "v.txt",
        "--file-friendly-logging",
        "--include-package",
        "json",
    ]
    monkeypatch.setattr(sys, "argv", ["allennlp-elmo", *args])
    assert compat.main() is None
    _check_file(_hdf5(tmp_path / "a.hdf5"), refs, "embed_file/top/", "fixture")

    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    b_args = [str(source), str(tmp_path / "b.hdf5"), "--all", "--batch-size", "2", *files]
    result = CliRunner().invoke(app, ["allennlp-elmo", *b_args])
    assert result.exit_code == 0, result.output
    _check_file(_hdf5(tmp_path / "b.hdf5"), refs, "embed_file/all/", "fixture")

    c_args = [str(source), str(tmp_path / "c.hdf5"), "--average", "--batch-size", "2", *files, "--forget-sentences"]
    subprocess.run([sys.executable, "-m", "spacy_elmo.compat.allennlp", *c_args], check=True)
    got = _hdf5(tmp_path / "c.hdf5")
    assert "sentence_to_index" not in got
    got["sentence_to_index"] = json.loads(str(refs["embed_file/average/sentence_to_index"]))
    _check_file(got, refs, "embed_file/average/", "fixture")


def test_command_line_errors(fixture_dir, tmp_path):
    files = ["--options-file", str(fixture_dir / "options.json"), "--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    blank = tmp_path / "blank.txt"
    blank.write_text("a b\n\nc\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"empty lines at indexes \[1\]"):
        compat.main(argv=[str(blank), str(tmp_path / "x.hdf5"), "--all", *files])
    assert not (tmp_path / "x.hdf5").exists()
    repeated = tmp_path / "repeated.txt"
    repeated.write_text("a b\nc\na b\n", encoding="utf-8")
    with pytest.raises(ConfigurationError, match="Key already exists"):
        compat.main(argv=[str(repeated), str(tmp_path / "y.hdf5"), "--all", "--use-sentence-keys", *files])
    with pytest.raises(SystemExit):  # argparse: one of --all / --top / --average is required
        compat.main(argv=[str(repeated), str(tmp_path / "w.hdf5"), *files])
    with pytest.raises(SystemExit):
        compat.main(argv=[str(tmp_path / "missing.txt"), str(tmp_path / "w.hdf5"), "--all", *files])


def test_use_sentence_keys(fixture_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("the cat\na dog .\n", encoding="utf-8")
    files = [str(fixture_dir / "options.json"), str(fixture_dir / "lm_weights.hdf5")]
    with torch.no_grad():
        ElmoEmbedder(*files).embed_file(str(source), tmp_path / "k.hdf5", "top", use_sentence_keys=True)
    with torch.no_grad():
        ElmoEmbedder(*files).embed_file(str(source), tmp_path / "n.hdf5", "top")
    keyed, numbered = _hdf5(tmp_path / "k.hdf5"), _hdf5(tmp_path / "n.hdf5")
    assert set(keyed) == {"the cat", "a dog ."}
    assert numbered["sentence_to_index"] == {"the cat": "0", "a dog .": "1"}
    np.testing.assert_array_equal(keyed["a dog ."], numbered["1"])


def test_sentence_to_index_is_written_as_allennlp_writes_it(fixture_dir, tmp_path, backend):
    """AllenNLP's ``json.dumps`` escapes non-ASCII characters; ``spacy-elmo embed`` writes them as UTF-8 text."""
    from spacy_elmo.output.embed_file import embed_file

    source = tmp_path / "in.txt"
    source.write_text("café au lait\nthe cat\n", encoding="utf-8")
    files = [str(fixture_dir / "options.json"), str(fixture_dir / "lm_weights.hdf5")]
    with torch.no_grad():
        ElmoEmbedder(*files).embed_file(str(source), tmp_path / "a.hdf5", "top")
    embed_file(backend, source, tmp_path / "s.hdf5", output_format="top")
    expected = {"café au lait": "0", "the cat": "1"}
    for name, text in (
        ("a.hdf5", '{"caf\\u00e9 au lait": "0", "the cat": "1"}'),
        ("s.hdf5", json.dumps(expected, ensure_ascii=False)),
    ):
        with h5py.File(tmp_path / name, "r") as f:
            assert f["sentence_to_index"][0].decode("utf-8") == text and json.loads(text) == expected


# -- the fixture's own stateful reference activations (bilm-tf), directly ---------------------------


@pytest.fixture(scope="module")
def fixture_batches(fixture_dir):
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    files = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    return [
        ([groups[k][i].split() for k in range(3)], [np.concatenate(list(f[str(i)][...]), axis=-1) for f in files])
        for i in range(10)
    ]


def test_fresh_bilm_reproduces_the_stateful_reference_activations(fixture_dir, fixture_batches):
    bilm = _ElmoBiLm(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    worst = 0.0
    for sentences, expected in fixture_batches:
        with torch.no_grad():
            out = bilm(batch_to_ids(sentences))
        top, mask = remove_sentence_boundaries(out["activations"][2], out["mask"])
        assert mask.sum(dim=1).tolist() == [len(s) for s in sentences]
        for row, reference in enumerate(expected):
            ours = top[row, : len(sentences[row])].numpy()
            worst = max(worst, float(np.abs(ours - reference).max()))
            np.testing.assert_allclose(ours, reference, atol=1e-6, rtol=1e-5)
    print(f"stateful fixture replay through _ElmoBiLm: max abs diff {worst:.3g}")


def test_elmo_top_layer_only_reproduces_them_too(fixture_dir, fixture_batches):
    elmo = Elmo(
        fixture_dir / "options.json",
        fixture_dir / "lm_weights.hdf5",
        1,
        dropout=0.0,
        scalar_mix_parameters=[-9e10, -9e10, 1.0],
    )
    for sentences, expected in fixture_batches:
        with torch.no_grad():
            rep = elmo(batch_to_ids(sentences))["elmo_representations"][0]
        for row, reference in enumerate(expected):
            np.testing.assert_allclose(rep[row, : len(sentences[row])].numpy(), reference, atol=1e-6, rtol=1e-5)


def test_stateless_gives_batch_invariant_vectors(fixture_dir, fixture_batches, backend):
    """stateful=False: every call starts from zeros, so only the first batch matches the stateful reference,
    and each sentence gets this package's (ElmoBackend's) vectors whatever its batch."""
    files = (fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    stateless = ElmoEmbedder(*files, stateful=False)
    stateful = ElmoEmbedder(*files)
    gaps = []
    for sentences, expected in fixture_batches[:3]:
        a, b = stateless.embed_batch(sentences), stateful.embed_batch(sentences)
        gaps.append(max(float(np.abs(x[2] - e).max()) for x, e in zip(a, expected)))
        for _, y, e in zip(a, b, expected):
            np.testing.assert_allclose(y[2], e, atol=1e-6, rtol=1e-5)
    assert gaps[0] < 1e-5 and min(gaps[1:]) > 1e-2
    sentences = [s for batch, _ in fixture_batches[:2] for s in batch]
    alone = [stateless.embed_sentence(s) for s in sentences[::-1]][::-1]
    together = stateless.embed_batch(sentences)
    ours = backend.embed(sentences)
    for x, y, z in zip(alone, together, ours):
        assert_recomputed_close(x, y)
        assert_recomputed_close(x, z)


# -- the module structure AllenNLP code reaches into -----------------------------------------------


def test_module_structure_and_switches(fixture_dir):
    files = (fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    elmo = Elmo(*files, 2)
    assert isinstance(elmo._elmo_lstm, _ElmoBiLm)
    assert isinstance(elmo._elmo_lstm._token_embedder, _ElmoCharacterEncoder)
    assert elmo.get_output_dim() == 32 and elmo._elmo_lstm.num_layers == 3
    names = [n for n, _ in elmo.named_parameters()]
    bilm_names = [n for n in names if not n.startswith("scalar_mix_")]
    assert bilm_names and all("_elmo_lstm" in n for n in bilm_names)
    assert sorted(set(names) - set(bilm_names)) == sorted(
        f"scalar_mix_{k}.{p}"
        for k in range(2)
        for p in ("gamma", "scalar_parameters.0", "scalar_parameters.1", "scalar_parameters.2")
    )
    assert not any(p.requires_grad for n, p in elmo.named_parameters() if "_elmo_lstm" in n)
    assert all(p.requires_grad for n, p in elmo.named_parameters() if "scalar_mix" in n)
    ids = batch_to_ids([["a", "b"], ["c"]])
    elmo.eval()
    with torch.no_grad():
        first = elmo(ids)["elmo_representations"][0]
        second = elmo(ids)["elmo_representations"][0]
        elmo._elmo_lstm._elmo_lstm.reset_states()
        again = elmo(ids)["elmo_representations"][0]
    assert float((first - second).abs().max()) > 1e-4  # the state carried over
    np.testing.assert_array_equal(first.numpy(), again.numpy())  # reset: back to the first call's numbers
    elmo.train()
    torch.manual_seed(0)
    dropped = elmo(ids)["elmo_representations"][0]
    assert (dropped == 0).sum() > (first == 0).sum()  # dropout acts in train() only
    # module=: any biLM with num_layers and activations/mask (AllenNLP's option); files with it are refused
    wrapped = Elmo(None, None, 1, module=_ElmoBiLm(*files))
    assert wrapped.get_output_dim() == 32
    with pytest.raises(ConfigurationError):
        Elmo(*files, 1, module=_ElmoBiLm(*files))
    with pytest.raises(ConfigurationError):
        Elmo(*files, 1, scalar_mix_parameters=[1.0, 2.0])


def test_imports_no_allennlp_spacy_or_sklearn():
    code = (
        "import sys, spacy_elmo.compat.allennlp as m; m.Elmo; "
        "bad = {'allennlp', 'spacy', 'sklearn', 'thinc'} & {n.split('.')[0] for n in sys.modules}; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_defaults_name_the_published_original_model_through_the_download_cache(fixture_dir, monkeypatch):
    """AllenNLP's default URLs (its S3 host spelling) are the published "original" model, fetched by this package."""
    from spacy_elmo.compat.allennlp import util

    asked = []

    def published_files(entry):
        asked.append(entry.name)
        return fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5"

    monkeypatch.setattr(util, "published_files", published_files)
    embedder = ElmoEmbedder()
    assert asked == ["original"]
    assert embedder.embed_sentence(["a", "b"]).shape == (3, 2, 32)
    assert compat.DEFAULT_OPTIONS_FILE.endswith("elmo_2x4096_512_2048cnn_2xhighway_options.json")


def test_help_reaches_argparse_through_spacy_elmo(capsys):
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    result = CliRunner().invoke(app, ["allennlp-elmo", "--help"])
    assert result.exit_code == 0
    assert "usage: spacy-elmo allennlp-elmo" in result.output and "--use-sentence-keys" in result.output


def test_a_non_str_token_or_an_untokenized_sentence_is_a_type_error_naming_it(fixture_dir):
    """docs/guarantees.md: non-string tokens raise TypeError naming the sentence and token (not AttributeError)."""
    with pytest.raises(TypeError, match=r"sentence 1, token 0: expected str, got int \(3\)"):
        batch_to_ids([["a"], [3, "b"]])
    embedder = ElmoEmbedder(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    with pytest.raises(TypeError, match=r"sentence 0, token 1: expected str, got int \(5\)"):
        embedder.embed_batch([["a", 5]])
    with pytest.raises(TypeError, match=r"^sentence is a str, not a sequence of token strings"):
        embedder.embed_sentence("the cat sat")


def test_main_takes_allennlps_argv_with_the_subcommand_word(fixture_dir, tmp_path, monkeypatch):
    """Code written for ``from allennlp.commands import main`` sets ``sys.argv = [prog, "elmo", IN, OUT, ...]``."""
    refs = dict(np.load(REFS / "refs_fixture.npz"))
    lines = MANIFEST["cases"]["fixture"]["lines"]
    files = ["--options-file", str(fixture_dir / "options.json"), "--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    monkeypatch.chdir(tmp_path)
    Path("in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["allennlp", "elmo", "in.txt", "a.hdf5", "--all", "--batch-size", "2", *files])
    assert compat.main() is None
    _check_file(_hdf5(tmp_path / "a.hdf5"), refs, "embed_file/all/", "fixture")
    # options between the positional arguments, as argparse allows in AllenNLP
    compat.main(argv=["elmo", "in.txt", "--top", "--batch-size", "2", "t.hdf5", *files])
    _check_file(_hdf5(tmp_path / "t.hdf5"), refs, "embed_file/top/", "fixture")
    # the short form keeps working, for an input file named "elmo" too
    Path("elmo").write_text("\n".join(lines) + "\n", encoding="utf-8")
    compat.main(argv=["elmo", "b.hdf5", "--all", "--batch-size", "2", *files])
    _check_file(_hdf5(tmp_path / "b.hdf5"), refs, "embed_file/all/", "fixture")
    with pytest.raises(SystemExit):  # another subcommand word is an argparse error naming it
        compat.main(argv=["train", "in.txt", "c.hdf5", "--all", *files])
    assert not (tmp_path / "c.hdf5").exists()


def test_spacy_elmo_allennlp_elmo_errors_are_one_line_and_exit_2(fixture_dir, tmp_path):
    """Like every other subcommand: a missing file, an offline download or a blank line is one red line, exit 2."""
    from typer.testing import CliRunner

    from spacy_elmo.cli import app

    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    blank = tmp_path / "blank.txt"
    blank.write_text("a b\n\nc\n", encoding="utf-8")
    weights = ["--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    runs = {
        "options file not found": [
            str(source),
            str(tmp_path / "a.hdf5"),
            "--all",
            "--options-file",
            "nope.json",
            *weights,
        ],
        "SPACY_ELMO_OFFLINE": [
            str(source),
            str(tmp_path / "b.hdf5"),
            "--all",
        ],  # the default, original model: not cached
        "empty lines at indexes [1]": [
            *(str(blank), str(tmp_path / "c.hdf5"), "--all"),
            *("--options-file", str(fixture_dir / "options.json"), *weights),
        ],
    }
    env = {"SPACY_ELMO_OFFLINE": "1", "SPACY_ELMO_HOME": str(tmp_path / "home")}
    for expected, args in runs.items():
        result = CliRunner().invoke(app, ["allennlp-elmo", *args], env=env)
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert lines[0].startswith("error: ") and expected in result.output, result.output
        assert len(" ".join(lines)) < 400 and "Traceback" not in result.output, result.output
    assert not list(tmp_path.rglob("*.hdf5"))


def test_the_migration_pages_typical_script_runs_with_only_its_imports_changed(fixture_dir, tmp_path, monkeypatch):
    """docs/migrating-from-allennlp.md's "typical script", each import replaced by the one in its comment; the
    published original model it names (375 MB) replaced by the test biLM, the one change made for a test."""
    import re

    page = (Path(__file__).resolve().parents[2] / "docs" / "migrating-from-allennlp.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, re.S) if "# Before (AllenNLP 0.9)" in b)
    lines = []
    for line in block.splitlines():
        if line.startswith(("from allennlp", "import allennlp")):
            line = line.partition("# ")[2]
            assert line.startswith("from spacy_elmo.compat.allennlp import "), line
        lines.append(line)
    script = "\n".join(lines)
    for url, local in [
        (compat.DEFAULT_OPTIONS_FILE, fixture_dir / "options.json"),
        (compat.DEFAULT_WEIGHT_FILE, fixture_dir / "lm_weights.hdf5"),
    ]:
        assert script.count(f'"{url}"') == 1
        script = script.replace(f'"{url}"', repr(str(local)))
    assert script.count("ElmoEmbedder()") == 1
    script = script.replace("ElmoEmbedder()", "ElmoEmbedder(options_file, weight_file)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sentences.txt").write_text("I ate an apple .\nThe cat sat .\n", encoding="utf-8")
    namespace = {"__name__": "__main__"}
    exec(compile(script, "migrating-from-allennlp.md typical script", "exec"), namespace)
    assert namespace["layers"].shape == (3, 5, 32) and np.isfinite(namespace["layers"]).all()
    assert torch.isfinite(namespace["loss"]) and namespace["loss"].requires_grad
    written = _hdf5(tmp_path / "elmo.hdf5")
    assert written["0"].shape == (5, 32) and written["1"].shape == (4, 32)  # "average": (tokens, dim)


_DISK_FULL = """
import resource, runpy, signal, sys
# a write past the limit fails with EFBIG, as one on a full disk with ENOSPC
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = [sys.argv[2], *sys.argv[3:]]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits")
@pytest.mark.parametrize("module", ["spacy_elmo.compat.allennlp", "spacy_elmo"])
def test_a_full_disk_stops_the_command_with_one_error_and_no_file(fixture_dir, tmp_path, module):
    """ElmoEmbedder.embed_file wrote through plain h5py: hundreds of "Exception ignored" blocks, then SIGSEGV, and a
    partial file left behind. It now writes through `spacy-elmo embed`'s guarded writer."""
    words = ["the", "bank", "river", "money", "a", "of", "went"]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(words[(i * 7 + j) % 7] for j in range(30)) for i in range(400)) + "\n")
    out = tmp_path / "out" / "vectors.hdf5"
    out.parent.mkdir()
    files = ["--options-file", str(fixture_dir / "options.json"), "--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    args = [str(text), str(out), "--all", *files]
    if module == "spacy_elmo":
        args = ["allennlp-elmo", *args]
    done = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, str(200_000), module, *args], capture_output=True, text=True, timeout=180
    )
    assert done.returncode > 0, (done.returncode, done.stderr[-2000:])  # an error exit, not a signal (SIGSEGV)
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]
    message = f"cannot write {out}: file too large (errno EFBIG)"
    if module == "spacy_elmo":  # `spacy-elmo allennlp-elmo`: one red line and exit 2, as every subcommand
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [f"error: {message}"], done.stderr
    else:  # AllenNLP's own command raises (a traceback, as AllenNLP's does) whose last line names the output
        assert done.stderr.strip().splitlines()[-1].endswith(message), done.stderr[-2000:]
    assert list(out.parent.iterdir()) == []  # neither the output nor a partial file is left


class _FillingDisk:
    """A file whose disk is full after ``room`` bytes: a write past them fails with ENOSPC."""

    def __init__(self, file, room):
        self._file, self._room = file, room

    def write(self, data):
        import errno

        if self._file.tell() + len(memoryview(data).cast("B")) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._file.write(data)

    def __getattr__(self, name):
        return getattr(self._file, name)


def test_embed_file_stops_at_the_first_failed_write(fixture_dir, tmp_path, monkeypatch):
    """ENOSPC reaches HDF5 only through the guard: embed_file stops at the first failed dataset, names the output
    and leaves no file."""
    from spacy_elmo.output.write_guard import GuardedFile, WriteFailedError

    opened = GuardedFile.__init__

    def on_a_small_disk(self, *args, **kwargs):
        opened(self, *args, **kwargs)
        self._file = _FillingDisk(self._file, room=30_000)

    monkeypatch.setattr(GuardedFile, "__init__", on_a_small_disk)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(["the bank of the river went"] * 60) + "\n")
    embedder = ElmoEmbedder(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    embedded = []
    embed_batch = embedder.embed_batch

    def counted(batch):
        embedded.extend(batch)
        return embed_batch(batch)

    monkeypatch.setattr(embedder, "embed_batch", counted)
    out = tmp_path / "out.hdf5"
    with pytest.raises(WriteFailedError, match=rf"cannot write {out}: no space left on device \(errno ENOSPC\)"):
        embedder.embed_file(str(source), str(out), batch_size=2)
    assert list(tmp_path.iterdir()) == [source]
    assert 0 < len(embedded) < 60  # stopped at the first failed write, not after embedding every line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_embed_file_refuses_an_endless_line(fixture_dir, tmp_path, monkeypatch):
    """The whole input was read into memory: /dev/zero ran until a MemoryError. Lines are bounded as in `embed`."""
    from spacy_elmo.output import embed_file as embed_file_module

    embedder = ElmoEmbedder(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    out = tmp_path / "out.hdf5"
    with pytest.raises(ValueError, match=r"^/dev/zero, line 1: longer than 1,048,576 bytes"):
        embedder.embed_file("/dev/zero", str(out))
    monkeypatch.setattr(embed_file_module, "MAX_LINE_BYTES", 6)
    source = tmp_path / "in.txt"
    source.write_text("the é\nriver\n", encoding="utf-8")  # 6 bytes of UTF-8, then 5
    embedder.embed_file(str(source), str(out))
    source.write_text("the éé\n", encoding="utf-8")  # 6 characters, 8 bytes
    with open(source, encoding="utf-8") as handle, pytest.raises(ValueError, match=r"in\.txt, line 1: longer than 6"):
        embedder.embed_file(handle, str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.hdf5"]
