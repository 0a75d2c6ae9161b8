import json
import shutil

import h5py
import numpy as np
import pytest
import torch

from spacy_elmo.bilm import BiLM, WeightFileError, batch_to_char_ids, load_model, read_options, save_model
from spacy_elmo.bilm.weights import options_from_dict
from tests.numerics import assert_recomputed_close


def _all_datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


def test_write_round_trips_bit_exactly(fixture_dir, tmp_path):
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    save_model(model, tmp_path)
    original, written = _all_datasets(fixture_dir / "lm_weights.hdf5"), _all_datasets(tmp_path / "weights.hdf5")
    assert set(original) == set(written)
    for name in original:
        assert original[name].dtype == written[name].dtype == np.float32
        assert np.array_equal(original[name], written[name]), name
    reloaded = load_model(tmp_path / "options.json", tmp_path / "weights.hdf5")
    for (name, a), (_, b) in zip(model.state_dict().items(), reloaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_forget_bias_is_added_at_run_time(fixture_dir):
    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    cell = model.lstm.forward_layers[0]
    raw = h5py.File(fixture_dir / "lm_weights.hdf5", "r")["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/B"][...]
    assert np.array_equal(cell.bias.detach().numpy(), raw)
    effective = (cell.bias + cell.forget_offset).detach().numpy()
    assert np.allclose(effective[128:192], raw[128:192] + 1.0)
    assert np.array_equal(effective[:128], raw[:128])


def test_released_options_extra_keys_are_ignored(fixture_dir, tmp_path):
    raw = json.loads((fixture_dir / "options.json").read_text())
    raw.update({"bidirectional": True, "n_epochs": 10, "unroll_steps": 20, "dropout": 0.1, "all_clip_norm_val": 10.0})
    raw["char_cnn"]["n_characters"] = 261
    (tmp_path / "options.json").write_text(json.dumps(raw))
    model = load_model(tmp_path / "options.json", fixture_dir / "lm_weights.hdf5")
    assert model.token_encoder.char_embed.weight.shape == (262, 4)


def test_shape_mismatch_names_file_dataset_and_shapes(fixture_dir, tmp_path):
    raw = json.loads((fixture_dir / "options.json").read_text())
    raw["lstm"]["dim"] = 32
    (tmp_path / "options.json").write_text(json.dumps(raw))
    with pytest.raises(WeightFileError) as err:
        load_model(tmp_path / "options.json", fixture_dir / "lm_weights.hdf5")
    message = str(err.value)
    assert "lm_weights.hdf5" in message and "RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0" in message
    assert "(32, 256)" in message and "(32, 128)" in message


def test_missing_dataset(fixture_dir, tmp_path):
    shutil.copy(fixture_dir / "lm_weights.hdf5", tmp_path / "w.hdf5")
    with h5py.File(tmp_path / "w.hdf5", "a") as f:
        del f["CNN_proj/W_proj"]
    with pytest.raises(WeightFileError, match="missing dataset 'CNN_proj/W_proj'"):
        load_model(fixture_dir / "options.json", tmp_path / "w.hdf5")


def test_missing_truncated_and_bad_files(fixture_dir, tmp_path):
    with pytest.raises(WeightFileError, match=r"not found.*nope\.hdf5"):
        load_model(fixture_dir / "options.json", tmp_path / "nope.hdf5")
    data = (fixture_dir / "lm_weights.hdf5").read_bytes()
    (tmp_path / "cut.hdf5").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightFileError, match=r"cut\.hdf5"):
        load_model(fixture_dir / "options.json", tmp_path / "cut.hdf5")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(WeightFileError, match=r"bad\.json.*not valid JSON"):
        read_options(tmp_path / "bad.json")
    with pytest.raises(WeightFileError, match=r"missing option lstm\.projection_dim"):
        options_from_dict(
            {"lstm": {"dim": 4, "n_layers": 1}, "char_cnn": {"filters": [[1, 2]], "embedding": {"dim": 2}}}
        )


def _tiny_options(skip, activation="relu"):
    return options_from_dict(
        {
            "lstm": {
                "dim": 12,
                "projection_dim": 6,
                "n_layers": 2,
                "cell_clip": 3,
                "proj_clip": 3,
                "use_skip_connections": skip,
            },
            "char_cnn": {
                "filters": [[1, 4], [2, 6]],
                "embedding": {"dim": 3},
                "n_highway": 1,
                "activation": activation,
                "n_characters": 262,
            },
        }
    )


def _random_model(options, seed=0):
    torch.manual_seed(seed)
    model = BiLM(options)
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.5, 0.5)
        model.token_encoder.char_embed.weight[0] = 0
    return model.eval()


def test_skip_connections_true_and_false(tmp_path):
    with_skip = _random_model(_tiny_options(True))
    save_model(with_skip, tmp_path / "skip")
    without = load_model(_write_options(tmp_path / "noskip", _tiny_options(False)), tmp_path / "skip" / "weights.hdf5")
    ids = torch.as_tensor(batch_to_char_ids([["a", "bank", "loan"], ["x"]]))
    with torch.inference_mode():
        a, _mask, _ = with_skip(ids)
        b, _, _ = without(ids)
    assert torch.equal(a[:2], b[:2])  # layers 0 and 1 have no residual in either
    # the residual adds layer 1's output (each direction's own) to layer 2's
    torch.testing.assert_close(a[2] - b[2], a[1], atol=1e-6, rtol=1e-5)


def _write_options(directory, options):
    directory.mkdir(parents=True)
    path = directory / "options.json"
    path.write_text(json.dumps(options.to_json()))
    return path


def test_tanh_encoder_matches_numpy(tmp_path):
    model = _random_model(_tiny_options(True, activation="tanh"))
    ids = batch_to_char_ids([["ok"]])[0]
    enc = model.token_encoder
    emb = enc.char_embed.weight.detach().numpy()[ids[0]]  # (50, 3)
    pooled = []
    for conv in enc.convs:
        w, b = conv.weight.detach().numpy(), conv.bias.detach().numpy()  # (n, 3, width)
        width = w.shape[2]
        windows = np.stack([emb[t : t + width] for t in range(50 - width + 1)])  # (T, width, 3)
        pooled.append(np.tanh((np.einsum("twc,ncw->tn", windows, w) + b).max(axis=0)))
    x = np.concatenate(pooled)
    hw = enc.highways[0]
    g = 1 / (1 + np.exp(-(hw.carry.weight.detach().numpy() @ x + hw.carry.bias.detach().numpy())))
    f = np.maximum(hw.transform.weight.detach().numpy() @ x + hw.transform.bias.detach().numpy(), 0)
    x = g * f + (1 - g) * x
    expected = enc.projection.weight.detach().numpy() @ x + enc.projection.bias.detach().numpy()
    with torch.inference_mode():
        ours = enc(torch.as_tensor(ids[:1]))[0].numpy()
    assert_recomputed_close(ours, expected)


def test_unknown_activation_is_rejected(tmp_path):
    raw = _tiny_options(True).to_json()
    raw["char_cnn"]["activation"] = "gelu"
    with pytest.raises(WeightFileError, match="activation"):
        options_from_dict(raw)
