"""The TF-Hub-style module (spacy_elmo.hub) and the similarity demo, against load_bilm().embed."""

import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_elmo import hub
from spacy_elmo.cli import app
from tests.numerics import assert_recomputed_close

SENTENCES = ["They sat on the bank of the river .", "The bank will approve your loan .", "Hi", ""]


@pytest.fixture(scope="module")
def elmo(fixture_dir):
    return hub.load(str(fixture_dir))


def test_default_signature_has_tf_hubs_keys_shapes_and_values(elmo, backend):
    out = elmo.signatures["default"](SENTENCES)
    assert sorted(out) == ["default", "elmo", "lstm_outputs1", "lstm_outputs2", "sequence_len", "word_emb"]
    tokens = [s.split() for s in SENTENCES]
    assert out["sequence_len"].tolist() == [9, 7, 1, 0] and out["sequence_len"].dtype == np.int32
    assert out["word_emb"].shape == (4, 9, backend.dim // 2)
    assert out["elmo"].shape == out["lstm_outputs1"].shape == (4, 9, backend.dim)
    assert out["default"].shape == (4, backend.dim)
    for row, sentence in enumerate(tokens):
        n = len(sentence)
        layers = backend.embed([sentence])[0]
        assert_recomputed_close(out["word_emb"][row, :n], layers[0, :, : backend.dim // 2])
        assert_recomputed_close(out["lstm_outputs1"][row, :n], layers[1])
        assert_recomputed_close(out["lstm_outputs2"][row, :n], layers[2])
        assert_recomputed_close(out["elmo"][row, :n], layers.mean(axis=0))
        expected_default = layers.mean(axis=0).mean(axis=0) if n else np.zeros(backend.dim)
        assert_recomputed_close(out["default"][row], expected_default)
        for key in ("word_emb", "lstm_outputs1", "elmo"):
            assert not out[key][row, n:].any()  # padding positions are zeros
    # the seed's indices: "bank" at 4 in the river sentence and at 1 in the money sentence
    river, money = out["elmo"][0, 4], out["elmo"][1, 1]
    assert 0 < float(river @ money / np.linalg.norm(river) / np.linalg.norm(money)) < 1


def test_tokens_signature_equals_default(elmo):
    padded = [["The", "bank", "will", "approve", "your", "loan", "."], ["Hi", "", "", "", "", "", ""]]
    by_tokens = elmo.signatures["tokens"](tokens=padded, sequence_len=[7, 1])
    by_strings = elmo.signatures["default"](SENTENCES[1:3])
    for key in by_strings:
        np.testing.assert_array_equal(by_tokens[key], by_strings[key])  # same sentences, same batch: same computation
    np.testing.assert_array_equal(elmo(SENTENCES[1:3], signature="default", as_dict=False), by_strings["default"])
    with pytest.raises(ValueError, match=r"sequence_len\[1\]=9: .* \(row 1 of tokens has 7 entries\)"):
        elmo.signatures["tokens"](tokens=padded, sequence_len=[7, 9])
    for length in (2.7, "2", True, float("nan")):  # were read with int(): 2.7 as 2, "2" as 2, True as 1
        with pytest.raises(ValueError, match=r"sequence_len\[1\]="):
            elmo.signatures["tokens"](tokens=padded, sequence_len=[7, length])
    with pytest.raises(TypeError, match="list of strings"):
        elmo.signatures["default"]("one string")


def test_tokens_signature_takes_numpy_rows_and_refuses_bytes_before_embedding(elmo):
    """A numpy array of strings (what TF users hold) is its rows; a bytes token (a ``tf.string`` tensor's
    ``.numpy()``), padding included, is a TypeError naming it, never embedded as the string "b'The'"."""
    padded = [["The", "bank", ""], ["Hi", "", ""]]
    as_list = elmo.signatures["tokens"](tokens=padded, sequence_len=[2, 1])
    as_array = elmo.signatures["tokens"](tokens=np.array(padded), sequence_len=np.array([2, 1], dtype=np.int32))
    for key in as_list:
        np.testing.assert_array_equal(as_array[key], as_list[key])
    as_bytes = np.array([[token.encode() for token in row] for row in padded])
    with pytest.raises(TypeError, match=r"^tokens: sentence 0, token 0: expected str, got bytes \(b'The'\)"):
        elmo.signatures["tokens"](tokens=as_bytes, sequence_len=[2, 1])
    with pytest.raises(TypeError, match=r"^tokens: sentence 1, token 2: expected str, got NoneType"):
        elmo.signatures["tokens"](tokens=[["The", "bank", ""], ["Hi", "", None]], sequence_len=[2, 1])


def test_similarity_command_table_and_plot(fixture_dir, tmp_path):
    out = tmp_path / "bank.png"
    result = CliRunner().invoke(
        app,
        [
            "similarity",
            "They sat on the bank of the river .",
            "The bank will approve your loan .",
            "--word",
            "bank",
            "--model",
            str(fixture_dir),
            "--plot",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {
        line.split("  ")[1].strip(): float(line.split()[-1])
        for line in result.output.splitlines()
        if line.startswith("  layer") or line.startswith("  mix")
    }
    assert rows["layer 0 (char CNN, context-free)"] == pytest.approx(1.0, abs=1e-6)  # no context in layer 0
    assert rows["layer 2 (LSTM 2)"] < 0.999  # context moves the LSTM layers apart
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    missing = CliRunner().invoke(app, ["similarity", "a b", "c d", "--word", "bank", "--model", str(fixture_dir)])
    assert missing.exit_code == 2 and "no token 'bank'" in missing.output


def test_version():
    from spacy_elmo import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"spacy-elmo {__version__}"
