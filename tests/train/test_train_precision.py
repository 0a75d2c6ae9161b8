"""Training precision: auto picks bfloat16 only where it is native, a bfloat16 step's loss stays close to float32's,
the exported weights stay float32 in the standard layout."""

import json
import os
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import load_bilm
from spacy_elmo.bilm import cpu_support
from spacy_elmo.cli import app
from spacy_elmo.sources.model_paths import DEFAULT_MODEL_DIR
from spacy_elmo.train import train
from spacy_elmo.train.corpus.batching import tensorize
from spacy_elmo.train.network.precision import autocast, describe, training_dtype, warn_if_emulated
from spacy_elmo.train.run.evaluation import load_language_model
from tests.conftest import torch_threads
from tests.train.conftest import wikitext_lines


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    train_file, _ = wikitext_lines(data_dir, tmp_path_factory.mktemp("texts"), train=120)
    return train_file


@pytest.mark.parametrize(("native", "expected"), [(True, torch.bfloat16), (False, torch.float32)])
def test_auto_follows_the_cpus_native_bfloat16_and_says_why(monkeypatch, native, expected):
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: native)
    assert training_dtype("auto") == expected
    line = describe("auto", expected)
    assert line.startswith("training precision: " + ("bfloat16" if native else "float32"))
    assert ("no native bfloat16" in line) != native and cpu_support.isa_flags() in line
    # an explicit choice holds whatever the CPU has
    assert training_dtype("float32") == torch.float32 and training_dtype("bfloat16") == torch.bfloat16
    assert describe("float32", torch.float32) == "training precision: float32 (--precision float32)"


def test_bfloat16_asked_for_without_native_kernels_warns(monkeypatch):
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: False)
    with pytest.warns(cpu_support.SlowPrecisionWarning, match="--precision bfloat16 has no native kernels"):
        warn_if_emulated(torch.bfloat16)
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_emulated(torch.bfloat16)
        warn_if_emulated(torch.float32)


def test_auto_picks_float32_when_the_kernels_are_capped_to_avx2():
    """CI's AVX2 pass: oneDNN capped below AVX-512 runs bfloat16 emulated, so auto must train in float32."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    code = "from spacy_elmo.train.network.precision import training_dtype; print(training_dtype('auto'))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "torch.float32"


def test_the_cli_prints_the_precision_and_metrics_record_it(texts, tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: False)
    out = tmp_path / "model"
    args = ["train", str(out), "--train", str(texts), "--arch", "tiny", "--max-steps", "2", "--no-progress"]
    with torch_threads(1):
        result = CliRunner().invoke(app, [*args, "--threads", "1", "--token-budget", "512"])
    assert result.exit_code == 0, result.output
    assert "training precision: float32 (auto: no native bfloat16 kernels on this CPU" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "float32" and metrics["config"]["precision"] == "auto"
    bad = CliRunner().invoke(app, [*args, "--precision", "float16"])
    assert bad.exit_code == 2 and "--precision must be auto, bfloat16 or float32, not 'float16'" in bad.output


def test_a_bfloat16_step_loss_is_within_tolerance_of_float32(data_dir):
    """The bundled (trained) model on 40 WikiText-2 sentences: the mean NLL in bfloat16 mixed precision vs float32.

    Tolerance 0.1% of the loss: bfloat16 operands carry 8 significant bits (rounding <= 2^-9 = 0.2% each), but the
    products accumulate in float32 and every log-softmax, the LSTM state and the loss sums stay float32, so each
    token's log-probability moves by a fraction of 0.2% of the logits' size, in both directions, and the errors
    mostly cancel over the batch's ~2,000 predictions (measured on AMD Zen 5: 3.3e-5 relative, a 30x margin). A
    wrong cast (a bfloat16 log-softmax or loss sum) or a broken gate moves it by more. The gradients point the same
    way (cosine > 0.99)."""
    model, vocab = load_language_model(DEFAULT_MODEL_DIR)
    model.train()
    lines = (data_dir / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").splitlines()
    sentences = [line.split()[:60] for line in lines if len(line.split()) > 5][:40]
    batch = tensorize(sentences, vocab, crop_width=max(w for w, _ in model.options.filters))
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.zero_grad()
        with autocast(dtype):
            nll_f, nll_b, n = model(batch.chars, batch.token_index, batch.word_ids, batch.lengths)
        assert nll_f.dtype == torch.float32
        loss = (nll_f + nll_b) / (2 * n)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        results[dtype] = float(loss.detach()), grads
    (loss32, grad32), (loss16, grad16) = results[torch.float32], results[torch.bfloat16]
    assert loss16 == pytest.approx(loss32, rel=1e-3)
    assert loss16 != loss32  # the products really ran in bfloat16
    assert float(torch.nn.functional.cosine_similarity(grad16, grad32, dim=0)) > 0.99


def test_bfloat16_training_exports_float32_weights_the_backend_loads(texts, tiny_config, tmp_path):
    config = tiny_config(texts, token_budget=512, max_steps=3, precision="bfloat16")
    with torch_threads(1):
        metrics = train(config, tmp_path, progress=False)
    assert metrics["precision"] == "bfloat16"
    with h5py.File(tmp_path / "weights.hdf5", "r") as handle:
        dtypes = []
        handle.visititems(lambda name, obj: dtypes.append(obj.dtype) if isinstance(obj, h5py.Dataset) else None)
    assert dtypes and all(d == np.float32 for d in dtypes)
    backend = load_bilm(tmp_path)
    vectors = backend.embed([["The", "trained", "model", "loads", "."]])[0]
    assert vectors.dtype == np.float32 and np.isfinite(vectors).all()
