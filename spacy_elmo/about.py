"""The distribution's version, and how to install its extras (one home for what error messages and help say)."""

__version__ = "0.2.0"


def install_extra(extra: str) -> str:
    """How to install the ``extra`` of pyproject.toml (``"dask"``, ``"plot"``, ``"onnx"``): from a checkout, or its
    packages by name (which works wherever spacy-elmo came from)."""
    packages = {
        "dask": "'dask[array,bag,dataframe,diagnostics]' distributed dask-ml",
        "plot": "matplotlib",
        "onnx": "onnx onnxruntime",
    }[extra]
    return f"pip install {packages} (the [{extra}] extra; from a checkout: pip install -e '.[{extra}]')"
