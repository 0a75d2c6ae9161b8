"""The biLM as ONNX graphs, run on ONNX Runtime without torch: the one room of the package that knows ONNX.

:mod:`.graph` builds the two graphs from a loaded biLM's float32 weights (``onnx``; torch only to read the weights),
:mod:`.quantize` makes int8 graphs of them (``--precision int8``; ``onnx`` and ``onnxruntime``),
:mod:`.manifest` reads and checks an export folder's ``manifest.json``, and :mod:`.runner` computes the layers from
such a folder (numpy and ``onnxruntime`` only): the backend's runner for an exported model. Writing a folder is
``spacy-elmo export`` (:mod:`spacy_elmo.output.onnx_export`). The public names are imported on first use (PEP 562),
so importing this package imports neither torch nor onnxruntime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .manifest import OnnxFolderError
    from .runner import OnnxBiLM

# each public name -> the module that defines it, imported when the name is first used
_HOMES = {
    "OnnxBiLM": ".runner",
    "OnnxFolderError": ".manifest",
}

__all__ = ["OnnxBiLM", "OnnxFolderError"]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
