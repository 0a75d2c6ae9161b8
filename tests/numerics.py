"""One rule for comparing ELMo vectors that were computed twice.

Bit-equality holds only for the *same stored array* read back (DocBin, ``Doc.to_bytes``, HDF5 and
disk-cache round trips) or the same computation repeated with the same shapes on the same thread
count. Anything recomputed through another kernel, GEMM blocking, thread count, batch composition
or CPU (Intel vs AMD, AVX-512 vs AVX2 dispatch, MKL vs OpenBLAS) sums float32 products in another
order: each product is exact to ~6e-8 relative (float32 epsilon / 2), but a sum of K terms may
differ by up to ~K ulps of its largest term, and the LSTM carries such differences through its
steps. So two computations agree elementwise only relative to the *magnitude of the values* they
came from, not relative to each element (an element near zero keeps the absolute error of the
large terms that cancelled into it).

``assert_recomputed_close`` therefore allows ``RTOL`` of each element plus ``SCALE_ATOL`` times
the array's largest magnitude (the activation scale). 1e-5 of the scale is ~80 float32 ulps of the
largest value. Measured over the whole suite on an Intel Xeon (AVX-512) with the dispatch forced
to AVX2 and to no SIMD (``ATEN_CPU_CAPABILITY``), ``MKL_CBWR=COMPATIBLE``,
``MKL_ENABLE_INSTRUCTIONS=AVX2`` and 1 or 2 threads, the worst difference was 4.6e-7 of the scale
for activations (20x margin) and 1.9e-6 for gradients summed over ~200 tokens (5x margin); the AMD
EPYC failure that prompted this rule was 1.1e-6 absolute at scale ~3. Any real defect (a wrong
weight, gate order or mask) moves values by 1e-3 of the scale or more.

``TWO_FORMULAS_SCALE_ATOL`` is for the inference path against the autograd reference path on
random weights: the inference path also computes tanh as 2 sigmoid(2x) - 1 (1e-7 apart), and weights of
+-0.5 amplify that over the steps; the worst seen was 7.9e-6 of the scale (6x margin). The
published and fixture weights agree with the AllenNLP reference to 1e-6 (tests/bilm/test_parity.py,
which keeps its own fixed tolerance).
"""

from typing import Any

import numpy as np

RTOL = 1e-5
SCALE_ATOL = 1e-5
TWO_FORMULAS_SCALE_ATOL = 5e-5


def as_numpy(values: Any) -> np.ndarray:
    """A numpy array from an array, a (CPU or CUDA) torch tensor or a nested list."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.asarray(values)


def assert_recomputed_close(actual: Any, expected: Any, err_msg: str = "", scale_atol: float = SCALE_ATOL) -> None:
    """``actual`` equals ``expected`` up to float32 summation-order differences (see the module docstring)."""
    actual, expected = as_numpy(actual), as_numpy(expected)
    scale = float(np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=scale_atol * scale, err_msg=err_msg)
