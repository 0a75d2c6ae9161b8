"""int8 ONNX graphs: an export's float32 graphs with their products' weights in int8, for ``--precision int8``.

Torch-free (``onnx`` and ``onnxruntime.quantization``): :func:`quantize_graph` takes a graph's bytes and gives the
quantized graph's bytes, :func:`quantized_graphs` applies it to every graph an export writes but those kept in
float32 (:data:`KEPT_FLOAT32`). The export (:mod:`spacy_elmo.output.onnx_export`) checks the result against the torch
float32 path before it writes anything, with :data:`INT8_TOLERANCE` instead of float32's bound.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .graph import TOKEN_ENCODER_ROLE

# the graphs an int8 export keeps in float32: the token encoder. Quantized, it adds error to every layer, layer 0
# included, and gains almost nothing: the runner keeps token vectors per word, so the char CNN runs only for words
# not seen before (benchmarks/RESULTS.md, "int8 on ONNX Runtime")
KEPT_FLOAT32 = frozenset({TOKEN_ENCODER_ROLE})

# the largest error an int8 export may have against the torch float32 path, relative to each layer's largest
# absolute value over the check sentences (output/onnx_export.py's CHECK_SENTENCES): about twice the largest measured
# on the models at hand (benchmarks/RESULTS.md, "int8 on ONNX Runtime"), below what weight scales 1.5x off give
# (tests/onnx/test_onnx_int8.py)
INT8_TOLERANCE = 0.15

_PRE_PROCESS_ADVICE = "Please consider to run pre-processing"  # onnxruntime's warning for every graph it quantizes


def _not_pre_process_advice(record: logging.LogRecord) -> bool:
    """A logging filter: drops onnxruntime's advice to pre-process (a shape-inference pass for convolution
    models; the graphs here are already as ONNX Runtime optimizes them when it loads them)."""
    return not str(record.msg).startswith(_PRE_PROCESS_ADVICE)


def quantize_graph(graph: bytes) -> bytes:
    """The ONNX graph ``graph`` (serialized) with the weights of its products (``MatMul``, ``Gemm``, ``Conv``) in int8
    and their activations quantized on the fly (``onnxruntime.quantization.quantize_dynamic``), serialized.

    The settings are the ones correct on every x86 CPU an export may be served on, whatever CPU exports it:

    - ``EnableSubgraph``: the LSTM's recurrent products are inside the ``Scan`` bodies; without it only the input
      products before each ``Scan`` would be quantized.
    - ``weight_type=QInt8`` with ``reduce_range=True``: activations are uint8, weights 7-bit signed. ONNX Runtime
      multiplies uint8 by int8 with ``vpmaddubsw`` on AVX2-only CPUs (AMD Zen 3, older Intel) and on AVX-512 without
      VNNI, which adds two products into a saturating int16: 2 x 255 x 127 overflows it, 2 x 255 x 64 does not. With
      VNNI (``vpdpbusd``) nothing saturates, so the 7-bit weights cost some accuracy there and are right everywhere.
      ``QUInt8`` weights (uint8 x uint8, products widened to int16 first) are right everywhere too, a little more
      accurate, but much slower at batch 32, hardly faster than float32.
    - ``per_channel=True``: a scale per output column; with 7-bit weights a scale per matrix more than doubled the
      error on the bundled model.

    Measured in benchmarks/RESULTS.md, "int8 on ONNX Runtime, 2026-12-08".
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()  # (onnxruntime.quantization logs to the root logger)
    root.addFilter(_not_pre_process_advice)
    try:
        with tempfile.TemporaryDirectory(prefix="spacy-elmo-int8-") as tmp:
            source, out = Path(tmp) / "float32.onnx", Path(tmp) / "quantized.onnx"
            source.write_bytes(graph)  # (a path: onnxruntime before 1.18 takes no ModelProto)
            quantize_dynamic(
                source,
                out,
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
                extra_options={"EnableSubgraph": True},
            )
            return out.read_bytes()
    finally:
        root.removeFilter(_not_pre_process_advice)


def quantized_graphs(graphs: Mapping[str, bytes]) -> dict[str, bytes]:
    """Every graph of ``graphs`` (role -> serialized graph, as :func:`~.graph.serialized_graphs` gives them)
    quantized by :func:`quantize_graph`, but the roles in :data:`KEPT_FLOAT32`, which stay as they are."""
    return {role: data if role in KEPT_FLOAT32 else quantize_graph(data) for role, data in graphs.items()}


__all__ = ["INT8_TOLERANCE", "KEPT_FLOAT32", "quantize_graph", "quantized_graphs"]
