"""Which LSTM product's low precision moves the bundled trained model on repetitive input: one product at a time.

    nice .venv/bin/python benchmarks/bench_precision_per_product.py

Simulates int8 on the float32 reference path (``ProjectedLSTMCell.run``'s math, float32 everywhere else): a
product's weight rounded to 8 bits per output channel as ``engine.int8.quantize_weight`` does, and/or its activations
to 8 bits per tensor (asymmetric, as torch's dynamic quantization does); bfloat16 rounds both operands. Each
variant rounds only the products it names: ``in`` (the input projection x -> gates), ``st`` (the recurrent
h -> gates), ``pr`` (the projection of the cell output). Prints the worst layer's max difference over its scale
against exact float32, per input; a row at or above 4e-2 (int8's bound) means that product alone breaks it.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from spacy_elmo.bilm import lstm
from spacy_elmo.bilm.chars import batch_to_char_ids
from spacy_elmo.bilm.engine.int8 import quantize_weight
from spacy_elmo.bilm.weights import load_model
from spacy_elmo.sources.model_files import resolve_model_files

INPUTS = {'50 "."': ["."] * 50, '200 "the"': ["the"] * 200, '500 "."': ["."] * 500}
VARIANTS = {
    "none (float32)": {},
    "int8: every product": {"in": "wa", "st": "wa", "pr": "wa"},
    "int8: input projection alone": {"in": "wa"},
    "int8: recurrent alone": {"st": "wa"},
    "int8: projection alone": {"pr": "wa"},
    "int8 weights of the step products (activations exact)": {"st": "w", "pr": "w"},
    "int8 activations of the step products (weights exact)": {"st": "a", "pr": "a"},
    "bfloat16: every product": {"in": "b", "st": "b", "pr": "b"},
}
mode: dict[str, str] = {}


def activations_8bit(x: torch.Tensor) -> torch.Tensor:
    low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
    scale = torch.clamp((high - low) / 255, min=1e-12)
    zero = torch.round(-low / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale


def weight_8bit(in_out: torch.Tensor) -> torch.Tensor:
    q, scale = quantize_weight(in_out.t())
    return (q.float() * scale[:, None]).t()


def product(x: torch.Tensor, weight: torch.Tensor, role: str) -> torch.Tensor:
    how = mode.get(role, "")
    if "w" in how:
        weight = weight_8bit(weight)
    if "a" in how:
        x = activations_8bit(x)
    if "b" in how:
        x, weight = x.bfloat16().float(), weight.bfloat16().float()
    return x @ weight


def run(self, packed_input, batch_sizes, initial):
    """``ProjectedLSTMCell.run`` (no clips: the bundled model has none) with each product through :func:`product`."""
    gates_x = product(packed_input, self.input_weight, "in") + (self.bias + self.forget_offset)
    h, c = initial
    outputs, start, cd = [], 0, self.cell_dim
    for n in batch_sizes:
        gates = gates_x[start : start + n] + product(h[:n], self.state_weight, "st")
        start += n
        i, j = torch.sigmoid(gates[:, :cd]), torch.tanh(gates[:, cd : 2 * cd])
        f, o = torch.sigmoid(gates[:, 2 * cd : 3 * cd]), torch.sigmoid(gates[:, 3 * cd :])
        c = i * j + f * c[:n]
        h = product(o * torch.tanh(c), self.projection, "pr")
        outputs.append(h)
    return torch.cat(outputs), (h, c)


def main() -> int:
    lstm.ProjectedLSTMCell.run = run  # this process only: a measuring script
    model = load_model(*resolve_model_files("default")).eval().requires_grad_(True)  # the reference path

    def layers(tokens):
        acts, _, _ = model(torch.as_tensor(batch_to_char_ids([tokens])))
        return acts[:, 0].detach().numpy()

    exact = {name: layers(tokens) for name, tokens in INPUTS.items()}
    for variant, products in VARIANTS.items():
        mode.clear()
        mode.update(products)
        row = {}
        for name, tokens in INPUTS.items():
            diff = np.abs(layers(tokens) - exact[name]).max(axis=(1, 2))
            row[name] = round(float((diff / np.abs(exact[name]).max(axis=(1, 2))).max()), 4)
        print(json.dumps({variant: row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
