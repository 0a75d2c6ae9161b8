"""The biLM exported to ONNX, and run on ONNX Runtime without torch.

:func:`export_onnx` (torch and ``onnx`` needed, once) writes a folder of two graphs and a manifest; :class:`OnnxBiLM`
(numpy and ``onnxruntime`` only) computes the layers from that folder. The public names are imported on first use
(PEP 562), so importing this package, or the runner, imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..groundwork.lazy_exports import lazy_exports

if TYPE_CHECKING:  # pragma: no cover
    from .export import OnnxExportError, export_onnx
    from .manifest import OnnxFolderError
    from .runner import OnnxBiLM

# each public name -> the module that defines it, imported when the name is first used
_HOMES = {
    "OnnxBiLM": ".runner",
    "OnnxExportError": ".export",
    "OnnxFolderError": ".manifest",
    "export_onnx": ".export",
}

__all__ = ["OnnxBiLM", "OnnxExportError", "OnnxFolderError", "export_onnx"]


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, globals())
