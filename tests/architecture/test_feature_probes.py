"""Feature probes go through groundwork/probe.py (ARCHITECTURE.md, "Feature probes"): no ``hasattr`` or defaulted
``getattr`` on a library the package depends on, which an older version of it answers with another exception than
AttributeError (torch 2.1's ``torch.backends.cuda.matmul`` raises AssertionError) and so crashes instead of
answering. Each probe's two sides are tested in tests/groundwork/test_probe.py."""

import ast

from tests.architecture.arch_scan import MODULES, dotted_name, import_aliases

# the libraries whose features change between the versions pyproject.toml takes
LIBRARIES = {"torch", "spacy", "thinc", "numpy", "sklearn", "scipy", "h5py", "safetensors", "confection", "pydantic"}
PROBE_MODULE = "spacy_elmo.groundwork.probe"


def bare_probes(source: str) -> list[tuple[int, str]]:
    """``(line, probed)`` for each ``hasattr(x, ...)`` or ``getattr(x, name, default)`` whose ``x`` is one of
    :data:`LIBRARIES` or an attribute path into one (``torch.backends.cuda.matmul``)."""
    tree = ast.parse(source)
    aliases = import_aliases(tree)
    found = []
    for node in ast.walk(tree):  # hasattr(getattr(torch.x, "y", None), "z"): the getattr is the probe found
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        probing = node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)
        name = dotted_name(node.args[0], aliases)
        if probing and name.split(".")[0] in LIBRARIES:
            found.append((node.lineno, name))
    return sorted(found)


def test_the_scan_sees_bare_probes():
    """Guards the check below: main's probes before the helper are found, the helper's calls and probes of the
    package's own objects are not."""
    broken = """
import numpy as np
import torch
from torch import backends
_PER_BACKEND = hasattr(torch.backends.cuda.matmul, "fp32_precision")
_CPU = hasattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision")
oom = getattr(torch.cuda, "OutOfMemoryError", ())
flag = getattr(backends.cudnn, "conv", None)
copy = hasattr(np, "copy")
"""
    assert bare_probes(broken) == [
        (5, "torch.backends.cuda.matmul"),
        (6, "torch.backends.mkldnn"),
        (7, "torch.cuda"),
        (8, "torch.backends.cudnn"),
        (9, "numpy"),
    ]
    fine = """
import os
import torch
from .probe import feature, has_feature
module = feature(torch, "xpu")
ok = has_feature(torch, "backends.cuda.matmul.fp32_precision")
dtype = getattr(torch, "float32")
fork = hasattr(os, "register_at_fork")
rows = X.iloc if hasattr(X, "iloc") else X
"""
    assert bare_probes(fine) == []


def test_every_feature_probe_goes_through_the_helper():
    found = {
        name: hits
        for name, path in MODULES.items()
        if name != PROBE_MODULE and (hits := bare_probes(path.read_text(encoding="utf-8")))
    }
    assert not found, f"probe these through spacy_elmo.groundwork.probe.feature / has_feature: {found}"
