"""How text reaches the biLM: front ends only through windows.embed_segments, and one embed call's order
(ARCHITECTURE.md, "One embed call", "Front ends through embed_segments")."""

import ast
from pathlib import Path

from arch_scan import (
    MODULES,
)

FRONT_ENDS = (
    "spacy_elmo.hub",
    "spacy_elmo.similarity",
    "spacy_elmo.dask",
    "spacy_elmo.sklearn",
    "spacy_elmo.runtime.text_rows",
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
    assert embed_calls(MODULES["spacy_elmo.runtime.windows"])  # the check sees what it looks for
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
