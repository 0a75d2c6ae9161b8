"""Worst-layer error of each low precision vs float32 on this CPU's kernels
(the figures of tests/bilm/test_precision.py).

    .venv/bin/python benchmarks/bench_precision_errors.py                      # this CPU's kernels
    ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
        FBGEMM_ENABLE_INSTRUCTIONS=AVX2 .venv/bin/python benchmarks/bench_precision_errors.py   # AVX2's

Prints one JSON line: the fixture's 30 sentences (int8, bfloat16, float16), random small models
(3 seeds, 12 sentences), and the "original" architecture (random weights at bilm-tf's init scale,
32 wikitext-2 test sentences of 6-40 tokens) per layer; error = max |low - float32| / the layer's
max |float32|.
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from spacy_elmo import load_bilm
from spacy_elmo.bilm import BiLM, BiLMOptions, cpu_support
from spacy_elmo.bilm.weights import save_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.bilm.test_cpu_support import ORIGINAL
from tests.bilm.test_inference_path import _options, _random_batch


def err(low, exact):
    worst = np.max([np.abs(a - b).max(axis=(1, 2)) for a, b in zip(low, exact)], axis=0)
    return worst / np.max([np.abs(b).max(axis=(1, 2)) for b in exact], axis=0)


fx = str(Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "allennlp_elmo")
sent = [s.split() for g in json.loads(Path(fx, "sentences.json").read_text(encoding="utf-8")) for s in g]
ex = load_bilm(fx).embed(sent)
out = {"isa": cpu_support.isa_flags()}
for d in ["int8", "bfloat16", "float16"]:
    out["fixture " + d] = err(load_bilm(fx, dtype=d).embed(sent), ex).max()
tmp = Path(tempfile.mkdtemp())
for d in ["int8", "bfloat16"]:
    worst = 0
    for seed in range(3):
        torch.manual_seed(seed)
        dd = save_model(BiLM(_options(cell_dim=64, projection_dim=16)), tmp / f"m{seed}")
        s = _random_batch(seed=seed, n=12, longest=20)
        worst = max(worst, err(load_bilm(dd, dtype=d).embed(s), load_bilm(dd).embed(s)).max())
    out["random " + d] = worst
torch.manual_seed(0)
m = BiLM(BiLMOptions(**ORIGINAL))
with torch.no_grad():
    m.token_encoder.char_embed.weight.normal_(0, 1).mul_(0.5)
    for h in m.token_encoder.highways:
        h.carry.bias.fill_(-2.0)
od = save_model(m, tmp / "orig")
del m
test_lines = (Path(fx).parents[1] / "data" / "wikitext-2" / "test.txt").read_text(encoding="utf-8").splitlines()
lines = [line.split() for line in test_lines if 5 < len(line.split()) <= 40][:32]
ex = load_bilm(od).embed(lines)
out["original int8 per layer"] = err(load_bilm(od, dtype="int8").embed(lines), ex).round(4).tolist()
print(json.dumps({k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v) for k, v in out.items()}))
