"""How text reaches the biLM: front ends only through windows.embed_segments, and one embed call's order
(ARCHITECTURE.md, "One embed call", "Front ends through embed_segments")."""

import ast
from pathlib import Path

import pytest

from tests.architecture.arch_scan import (
    MODULES,
)

FRONT_ENDS = (
    "spacy_elmo.hub",
    "spacy_elmo.similarity",
    "spacy_elmo.dask",
    "spacy_elmo.sklearn",
    "spacy_elmo.runtime.features.text_rows",
    "spacy_elmo.output.embed_file",
    "spacy_elmo.output.cluster",
    "spacy_elmo.spacy.pipeline_component",
)


def embed_calls(path: Path) -> list[int]:
    """Line numbers of every ``<something>.embed(...)`` call in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "embed"
    ]


def test_front_ends_never_call_backend_embed():
    """Only windows.py hands token sequences to ``backend.embed``: a front end that did would get no windows and no
    per-call bound."""
    assert embed_calls(MODULES["spacy_elmo.runtime.embedding.windows"])  # the check sees what it looks for
    for name in FRONT_ENDS:
        assert name in MODULES, f"{name} is gone: update FRONT_ENDS"
        assert not embed_calls(MODULES[name]), (
            f"{name} calls .embed() at lines {embed_calls(MODULES[name])}: use windows.embed_segments"
        )


# -- one embed call ---------------------------------------------------------------------------------


def test_one_embed_call_looks_up_computes_and_writes_a_repeated_sentence_once(fixture_dir, tmp_path):
    """ARCHITECTURE.md's "One embed call" in its order: the memory cache for each sentence, the misses grouped by
    their tokens (so dedup comes before the disk), one disk lookup of the unique misses, each unique sentence
    computed once, then written once to the memory and disk caches; every position gets its own array."""
    import shutil

    import numpy as np

    from spacy_elmo import load_bilm

    shutil.copytree(fixture_dir, tmp_path / "model")  # a backend of its own, with empty caches
    backend = load_bilm(tmp_path / "model").configure_cache(cache_dir=tmp_path / "cache")
    calls: list[tuple[str, list[tuple[str, ...]]]] = []
    memory_get, disk_get, disk_put, embed_batch = (
        backend.memory_cache.get,
        backend.disk_cache.get_many,
        backend.disk_cache.put_many,
        backend._embed_batch,
    )

    def looked_up_in_memory(key):
        calls.append(("memory", [key]))
        return memory_get(key)

    def looked_up_on_disk(fingerprint, keys, *shape):
        calls.append(("disk get", list(keys)))
        return disk_get(fingerprint, keys, *shape)

    def written_to_disk(fingerprint, items):
        items = list(items)
        calls.append(("disk put", [key for key, _ in items]))
        return disk_put(fingerprint, items)

    def computed(batch):
        calls.append(("computed", [tuple(s) for s in batch]))
        return embed_batch(batch)

    backend.memory_cache.get = looked_up_in_memory
    backend.disk_cache.get_many = looked_up_on_disk
    backend.disk_cache.put_many = written_to_disk
    backend._embed_batch = computed
    bank, river = ("The", "bank", "will", "pay", "."), ("a", "river")

    out = backend.embed([list(bank), list(river), list(bank), [], list(bank)])
    # computed longest first, one batch; the empty sentence touches no cache
    assert calls == [
        ("memory", [bank]),
        ("memory", [river]),
        ("memory", [bank]),
        ("memory", [bank]),
        ("disk get", [bank, river]),
        ("computed", [bank, river]),
        ("disk put", [bank, river]),
    ]
    assert out[3].shape == (backend.n_layers + 1, 0, backend.dim)
    assert out[0] is not out[2] and out[2] is not out[4] and out[0].flags.writeable
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_array_equal(out[0], out[4])
    assert backend.memory_cache.get(bank) is not None  # results went into the memory cache

    backend.clear_cache()  # memory only: the disk cache keeps both sentences
    calls.clear()
    again = backend.embed([list(bank), list(bank), ["new", "words"]])
    assert calls == [
        ("memory", [bank]),
        ("memory", [bank]),
        ("memory", [("new", "words")]),
        ("disk get", [bank, ("new", "words")]),  # a disk hit is not computed, nor written again
        ("computed", [("new", "words")]),
        ("disk put", [("new", "words")]),
    ]
    np.testing.assert_array_equal(again[1], out[0])


# -- layers mixed in one place ---------------------------------------------------------------------

# the calls that weigh layers: a softmax of layer scalars (``exp(s - s.max())``, ``softmax``) or a weighted sum over
# the layer axis (``tensordot``)
MIXING_CALLS = {"exp", "softmax", "tensordot"}
# where layers may be weighed, and why
MIXING_ALLOWED = {
    "spacy_elmo.runtime.features.mix": "layer_weights and mix_layers: the one fixed mix",
    "spacy_elmo.spacy.mix_layer": "the trainable mix (a Thinc layer): its forward pass and its own gradients",
    "spacy_elmo.compat.allennlp.modules": "AllenNLP's ScalarMix, trainable torch parameters behind its API",
}


def mixing_calls(source: str) -> list[tuple[int, str]]:
    """``(line, call)`` of each call in ``source`` that weighs layers (:data:`MIXING_CALLS`, any spelling)."""
    return [
        (node.lineno, name)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        for name in [node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")]
        if name in MIXING_CALLS
    ]


def test_the_mix_scan_sees_a_mix_of_its_own():
    """Guards the check below: a softmax of layer scalars and a weighted sum are found."""
    source = """
import numpy as np
def select(layers, n):
    logits = np.full(n, 1.0 / n)
    weights = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    return np.tensordot(weights, layers, axes=(0, 0)), torch.softmax(logits, 0)
"""
    assert sorted(mixing_calls(source)) == [(5, "exp"), (5, "exp"), (6, "softmax"), (6, "tensordot")]


def test_layers_are_mixed_only_by_mix_layers():
    """Front ends and compat mix layers through ``runtime.features.mix.mix_layers`` / ``layer_weights``, so a mix
    means the same everywhere; only the trainable mixes (MIXING_ALLOWED) compute their own. train/'s softmax is the
    language model's output layer, no layer mix."""
    seen = set()
    for name, path in MODULES.items():
        if name.startswith("spacy_elmo.train"):
            continue
        for line, call in mixing_calls(path.read_text(encoding="utf-8")):
            if name in MIXING_ALLOWED:
                seen.add(name)
                continue
            pytest.fail(f"{name}:{line} weighs layers itself ({call}): use runtime.features.mix.mix_layers")
    assert seen == set(MIXING_ALLOWED), (
        f"MIXING_ALLOWED lists modules that mix nothing now: {set(MIXING_ALLOWED) - seen}"
    )


# -- one reader of stored layers --------------------------------------------------------------------


def stored_layer_reads(source: str) -> list[int]:
    """Lines that read a doc's stored layers directly: ``x.elmo_layers``, ``doc._.get(LAYERS)`` /
    ``getattr(doc._, LAYERS)`` (the constant or its value, ``"elmo_layers"``)."""

    def names_layers(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "LAYERS") or (
            isinstance(node, ast.Constant) and node.value == "elmo_layers"
        )

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "elmo_layers" and isinstance(node.ctx, ast.Load):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            key = (
                node.args[0]
                if called == "get"
                else node.args[1]
                if called == "getattr" and len(node.args) > 1
                else None
            )
            if key is not None and names_layers(key):
                found.append(node.lineno)
    return found


def test_the_stored_layer_scan_sees_direct_reads():
    source = """
a = doc._.elmo_layers
b = doc._.get(LAYERS)
c = getattr(doc._, "elmo_layers")
doc._.set(LAYERS, array)
d = f"doc._.{LAYERS}"
"""
    assert sorted(stored_layer_reads(source)) == [2, 3, 4]


def test_stored_layers_have_one_reader():
    """``doc._.elmo_layers`` is read only by runtime/features/stored_layers.py (stored_layers, fresh_layers), where the
    stale-layers policy lives; the component writes them (``doc._.set``), everyone else asks that module."""
    reader = "spacy_elmo.runtime.features.stored_layers"
    assert stored_layer_reads(MODULES[reader].read_text(encoding="utf-8"))  # sees them
    for name, path in MODULES.items():
        if name != reader:
            lines = stored_layer_reads(path.read_text(encoding="utf-8"))
            assert not lines, f"{name} reads doc._.elmo_layers at lines {lines}: use runtime.features.stored_layers"
