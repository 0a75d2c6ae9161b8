"""Every number a user gives (an argument, a config key, an environment variable) is checked by one of the checks of
``runtime/configuration/validation.py``: NaN, infinities, booleans, text, negatives and absurd sizes are refused with a
``ValueError`` or ``TypeError`` naming the setting, never an ``OverflowError`` or an error that names nothing.

The settings come from the code itself: each public API's parameters annotated ``int``/``float`` (or ``Optional`` of
one), the shared front-end settings' fields, and every ``SPACY_ELMO_*`` variable the package spells. A new numeric
parameter or variable fails :func:`test_every_numeric_setting_is_listed` until :data:`KINDS` (or :data:`NUMERIC_ENV`)
says what it takes.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import typing
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from spacy import __version__ as spacy_version

from spacy_elmo.groundwork.excerpt import excerpt
from spacy_elmo.runtime.configuration import validation
from spacy_elmo.runtime.embedding.backend import ElmoBackend, load_bilm
from spacy_elmo.runtime.embedding.cache import CACHE_MB_ENV, env_disk_mb
from spacy_elmo.runtime.features.front_settings import DASK_SETTINGS, FrontSettings, given_settings

PACKAGE = Path(__file__).resolve().parents[2] / "spacy_elmo"

# what each numeric setting takes, by its name (one name means one thing in every front end)
KINDS = {
    "batch_size": "count",  # an integer >= 1
    "max_batch_size": "count",  # simple_elmo's
    "max_length": "count",
    "window_overlap": "count from 0",  # an integer >= 0 (and below max_length)
    "token_cache_size": "count from 0",
    "cache_mb": "MiB from 0",  # a finite size, 0 turns the cache off, at most this machine's memory
    "disk_cache_mb": "MiB above 0",  # a finite size > 0
    "gamma": "finite",  # any finite number (the mix's scale)
}
BAD_EVERYWHERE = [math.nan, math.inf, -math.inf, True, "abc", np.float64("nan"), None]
BAD = {
    "count": [-1, 0, 10**30, 2.0],
    "count from 0": [-1, 10**30, 2.0],
    "MiB from 0": [-1, 10**30, 10**400],
    "MiB above 0": [-1, 0, 10**30, 10**400],
    "finite": [10**400],
}
# numeric parameters of compat's APIs, which stand in for other tools with their defaults: checked where listed in
# KINDS, and these are known and left as the tool they stand in for takes them
COMPAT_LEFT = {
    "limit": "simple_elmo's char-id cache size: kept for compatibility, read by nothing",
    "output_layer": "ELMoForManyLangs' layer index (-1, -2 or a layer): checked against the model when used",
    "cuda_device": "AllenNLP's device index: resolve_device's check (tests/runtime/test_device_check.py)",
}


def _numeric(hint: Any) -> bool:
    """Whether an annotation is a number: ``int``, ``float`` or ``Optional`` of one (not a union with text, lists,
    booleans or callables: a layer spec or a verbosity is no number)."""
    kinds = [kind for kind in (typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,))]
    kinds = [kind for kind in kinds if kind is not type(None)]
    return bool(kinds) and all(kind in (int, float) for kind in kinds)


def numeric_parameters(function: Callable[..., Any]) -> dict[str, bool]:
    """The numeric parameters of ``function`` (from its signature's annotations), each with whether None is allowed."""
    hints = {name: _evaluated(function, p.annotation) for name, p in inspect.signature(function).parameters.items()}
    return {name: type(None) in typing.get_args(hint) for name, hint in hints.items() if _numeric(hint)}


def _evaluated(function: Callable[..., Any], annotation: Any) -> Any:
    """An annotation as a type; one that names what only type checkers import (no number) as itself."""
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, vars(inspect.getmodule(function)))  # the package's own annotations
    except NameError:
        return annotation


def _api_functions() -> dict[str, Callable[..., Any]]:
    """The functions whose signatures declare the numeric settings, by the API name a case is called through."""
    from spacy_elmo.output.embed_file import embed_file
    from spacy_elmo.sklearn import ElmoVectorizer
    from spacy_elmo.spacy.pipeline_component import ElmoComponent, make_elmo

    return {
        "load_bilm": load_bilm,
        "ElmoBackend.configure_cache": ElmoBackend.configure_cache,
        "ElmoBackend.embed": ElmoBackend.embed,
        "ElmoVectorizer": ElmoVectorizer.__init__,
        "elmo factory (config)": make_elmo,
        "ElmoComponent": ElmoComponent.__init__,
        "ElmoComponent.initialize": ElmoComponent.initialize,
        "ElmoComponent.pipe": ElmoComponent.pipe,
        "embed_file": embed_file,
    }


def _dask_settings() -> dict[str, bool]:
    """``spacy_elmo.dask``'s numeric settings: the shared settings' numeric fields it takes."""
    hints = typing.get_type_hints(FrontSettings)
    return {
        f.name: type(None) in typing.get_args(hints[f.name])
        for f in dataclasses.fields(FrontSettings)
        if f.name in DASK_SETTINGS and _numeric(hints[f.name])
    }


def _compat_functions() -> dict[str, Callable[..., Any]]:
    from spacy_elmo.compat.allennlp import ElmoEmbedder
    from spacy_elmo.compat.elmoformanylangs import Embedder
    from spacy_elmo.compat.simple_elmo import ElmoModel

    return {
        "ElmoModel.load": ElmoModel.load,
        "Embedder": Embedder.__init__,
        "ElmoEmbedder.embed_sentences": ElmoEmbedder.embed_sentences,
        "ElmoEmbedder.embed_file": ElmoEmbedder.embed_file,
    }


def settings_table() -> dict[str, dict[str, bool]]:
    """API -> its numeric settings (-> whether None is allowed), built from the code."""
    table = {name: numeric_parameters(function) for name, function in _api_functions().items()}
    table["spacy_elmo.dask"] = _dask_settings()
    return table


# -- calling each API with one setting --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def callers(fixture_dir, tmp_path_factory) -> dict[str, Callable[[dict[str, Any]], Any]]:
    """API name -> a call of it with the given settings (the rest valid), on the fixture model."""
    import spacy

    from spacy_elmo.output.embed_file import embed_file
    from spacy_elmo.sklearn import ElmoVectorizer
    from spacy_elmo.spacy.pipeline_component import ElmoComponent

    folder = tmp_path_factory.mktemp("numbers")
    (folder / "in.txt").write_text("a b\n", encoding="utf-8")
    model = str(fixture_dir)
    backend = load_bilm(model)
    nlp = spacy.blank("en")
    component = nlp.add_pipe("elmo", config={"model": model})

    def add_pipe(kw: dict[str, Any]) -> Any:
        return spacy.blank("en").add_pipe("elmo", config={"model": model, **kw})

    return {
        "load_bilm": lambda kw: load_bilm(model, **kw),
        "ElmoBackend.configure_cache": lambda kw: backend.configure_cache(**kw),
        "ElmoBackend.embed": lambda kw: backend.embed([["a"]], **kw),
        "ElmoVectorizer": lambda kw: ElmoVectorizer(model, **kw).fit(["a b"]),
        "elmo factory (config)": add_pipe,
        "ElmoComponent": lambda kw: ElmoComponent(nlp.vocab, model, **kw),
        "ElmoComponent.initialize": lambda kw: component.initialize(**kw),
        "ElmoComponent.pipe": lambda kw: list(component.pipe([nlp("a b")], **kw)),
        "embed_file": lambda kw: embed_file(backend, folder / "in.txt", folder / "out.h5", **kw),
        "spacy_elmo.dask": lambda kw: given_settings(kw, DASK_SETTINGS, "embed_texts"),
        "ElmoModel.load": lambda kw: _simple_elmo_load(model, kw),
        "Embedder": lambda kw: _manylangs_embedder(model, kw),
        "ElmoEmbedder.embed_sentences": lambda kw: _allennlp_embedder(model).embed_sentences([["a", "b"]], **kw),
        "ElmoEmbedder.embed_file": lambda kw: _allennlp_embedder(model).embed_file(
            folder / "in.txt", folder / "out.h5", **kw
        ),
    }


def _allennlp_embedder(model: str) -> Any:
    from spacy_elmo.compat.allennlp import ElmoEmbedder

    return ElmoEmbedder(f"{model}/options.json", f"{model}/lm_weights.hdf5")


def _simple_elmo_load(model: str, kw: dict[str, Any]) -> Any:
    from spacy_elmo.compat.simple_elmo import ElmoModel

    return ElmoModel().load(model, **kw)


def _manylangs_embedder(model: str, kw: dict[str, Any]) -> Any:
    from spacy_elmo.compat.elmoformanylangs import Embedder

    return Embedder(model, **kw)


def _cases() -> list[Any]:
    table = settings_table()
    compat = {name: numeric_parameters(function) for name, function in _compat_functions().items()}
    table.update({api: {k: v for k, v in params.items() if k in KINDS} for api, params in compat.items()})
    cases = []
    for api, params in table.items():
        for name, optional in params.items():
            for value in [*BAD_EVERYWHERE, *BAD[KINDS[name]]]:
                if value is None and optional:
                    continue
                cases.append(pytest.param(api, name, value, id=f"{api}-{name}={value!r}"))
    return cases


@pytest.mark.parametrize(("api", "name", "value"), _cases())
def test_a_bad_number_is_refused_naming_its_setting(callers, api, name, value):
    """nan, inf, booleans, text, negatives and sizes beyond the machine: a ValueError/TypeError naming the setting."""
    whole = isinstance(value, bool) or (isinstance(value, float) and value.is_integer())
    if api == "elmo factory (config)" and whole and spacy_version.startswith("3.7."):
        try:  # spaCy 3.7's config validation turns True into 1 and 2.0 into 2 before the factory sees them
            callers[api]({name: value})
        except (ValueError, TypeError) as err:
            assert name in str(err), f"{api}({name}={value!r}) raised without naming it: {err!r}"
        return
    with pytest.raises((ValueError, TypeError)) as caught:
        callers[api]({name: value})
    assert not isinstance(caught.value, OverflowError)
    assert name in str(caught.value), f"{api}({name}={value!r}) raised without naming it: {caught.value!r}"


def test_every_numeric_setting_is_listed():
    """A rule: each numeric parameter of the public APIs (their signatures) and each numeric field of the shared
    settings is in KINDS, and every API with one has a caller in the test above."""
    table = settings_table()
    unlisted = {f"{api}({name})" for api, params in table.items() for name in params if name not in KINDS}
    assert not unlisted, f"numeric settings without a check in this test's KINDS: {sorted(unlisted)}"
    compat = {name: numeric_parameters(function) for name, function in _compat_functions().items()}
    unknown = {
        f"{api}({n})" for api, params in compat.items() for n in params if n not in KINDS and n not in COMPAT_LEFT
    }
    assert not unknown, f"compat numeric parameters neither checked (KINDS) nor in COMPAT_LEFT: {sorted(unknown)}"
    # the table sees what it is meant to (guards the scan): the cache sizes of load_bilm, the component's config
    assert table["load_bilm"] == {"cache_mb": True, "disk_cache_mb": True, "token_cache_size": True}
    assert {"gamma", "batch_size", "max_length", "window_overlap"} <= set(table["elmo factory (config)"])


# -- the environment ---------------------------------------------------------------------------------------------

# every SPACY_ELMO_* variable the package reads: the numeric ones with their reader, the others with what they take
NUMERIC_ENV: dict[str, Callable[[], Any]] = {CACHE_MB_ENV: env_disk_mb}
OTHER_ENV = {
    "SPACY_ELMO_CACHE_DIR": "a folder",
    "SPACY_ELMO_HOME": "a folder",
    "SPACY_ELMO_OFFLINE": "a switch",
    "SPACY_ELMO_PACKED_WEIGHTS": "a switch",
    "SPACY_ELMO_FLOAT32_KERNELS": "onednn, mkl or auto",
    "SPACY_ELMO_DEBUG": "a switch (the command line shows tracebacks)",
}


def variables_spelled() -> set[str]:
    """Every ``SPACY_ELMO_*`` name the package's code spells (in a string, a docstring or a comment)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        found |= set(re.findall(r"\bSPACY_ELMO_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    return found


def test_every_environment_variable_is_listed():
    """A rule: a new SPACY_ELMO_* variable is said to be a number (and checked below) or what else it takes."""
    spelled = variables_spelled()
    assert CACHE_MB_ENV in spelled  # the scan sees what it looks for
    assert not spelled - set(NUMERIC_ENV) - set(OTHER_ENV), sorted(spelled - set(NUMERIC_ENV) - set(OTHER_ENV))


@pytest.mark.parametrize("variable", sorted(NUMERIC_ENV))
@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "-1", "0", "1e30", "True", "abc", "4096x"])
def test_a_bad_number_in_the_environment_is_refused_naming_the_variable(monkeypatch, variable, text):
    monkeypatch.setenv(variable, text)
    with pytest.raises(ValueError, match=f"^{variable}=.*: expected a finite number of MiB"):
        NUMERIC_ENV[variable]()


def test_numbers_in_range_pass_in_plain_types(monkeypatch):
    """numpy numbers pass as Python's; the bounds themselves pass."""
    assert type(validation.positive_int(np.int32(3), "batch_size")) is int
    assert validation.integer_in(np.uint8(0), "token_cache_size", 0) == 0
    assert validation.memory_mb(np.float32(0.5), "cache_mb") == 0.5
    assert validation.disk_mb(validation.MAX_DISK_MB, "disk_cache_mb") == validation.MAX_DISK_MB
    assert validation.integer_in(validation.MAX_COUNT, "n", 1) == validation.MAX_COUNT
    monkeypatch.setenv(CACHE_MB_ENV, " 12.5 ")
    assert env_disk_mb() == 12.5


def test_sizes_and_processes_are_bounded_by_the_machine(monkeypatch):
    """cache_mb at most the memory, processes at most the usable cores: each message says the bound and why."""
    monkeypatch.setattr(validation, "memory_bytes", lambda: 8 * 2**30)
    assert validation.memory_mb(8192, "cache_mb") == 8192
    with pytest.raises(ValueError, match=r"^cache_mb=8193: .* <= 8192 \(this machine's memory\)$"):
        validation.memory_mb(8193, "cache_mb")
    monkeypatch.setattr(validation, "memory_bytes", lambda: None)  # a system that does not say: the disk's bound
    assert validation.memory_mb(10**6, "cache_mb") == 10**6
    monkeypatch.setattr(validation, "usable_cores", lambda: 4)
    assert validation.process_count(4, "--processes") == 4
    with pytest.raises(ValueError, match=r"^--processes=5: expected a positive integer up to 4 \(the 4 CPU cores"):
        validation.process_count(5, "--processes")


def test_local_scheduler_workers_are_bounded_by_the_cores(monkeypatch):
    from spacy_elmo.output.argument_checks import read_scheduler

    monkeypatch.setattr(validation, "usable_cores", lambda: 2)
    assert read_scheduler("local:2") == 2 and read_scheduler("local:02") == 2
    for text in ("local:3", "local:100000", "local:" + "9" * 5000):
        with pytest.raises(ValueError, match=r"^scheduler local:N's N=.*: expected a positive integer up to 2 "):
            read_scheduler(text)
    with pytest.raises(ValueError, match="expected local:N with N >= 1 worker processes"):
        read_scheduler("local:000")


@pytest.mark.parametrize(
    "args, message",
    [
        (["embed", "in.txt", "out.h5", "--scheduler", "local:100000"], "scheduler local:N's N=100000: expected a"),
        (["train", "out", "--train", "in.txt", "--processes", "100000"], "--processes=100000: expected a positive"),
    ],
)
def test_the_command_line_bounds_its_processes_by_the_cores(args, message, tmp_path):
    """``embed --scheduler local:N`` and ``train --processes N`` beyond the cores: one line, before torch."""
    from tests.cli.test_cli_help import run_command

    (tmp_path / "in.txt").write_text("a b c\n", encoding="utf-8")
    status, said, imported = run_command(*args, cwd=tmp_path)
    assert status == 2 and said.startswith(f"error: {message}") and "CPU core" in said and "\n" not in said, said
    assert imported == [], f"spacy-elmo {args[0]} imported {imported} before checking its arguments"


def _train_numbers() -> list[Any]:
    """Each numeric TrainConfig field (its annotation: int, float or Optional of one) with each value no number."""
    from spacy_elmo.train.config import TrainConfig, option_flags

    hints = typing.get_type_hints(TrainConfig)
    cases = []
    for f in dataclasses.fields(TrainConfig):
        if not _numeric(hints[f.name]):
            continue
        whole = int in typing.get_args(hints[f.name]) or hints[f.name] is int
        # 1e30 is a float (a learning rate that large is for the rules to judge), never an int64
        for value in [math.nan, math.inf, -math.inf, True, "abc", 10**400, *([10**30, 2.0] if whole else [])]:
            cases.append(pytest.param(f.name, option_flags(f)[0], value, id=f"{f.name}={excerpt(value, 12)}"))
    return cases


@pytest.mark.parametrize(("name", "flag", "value"), _train_numbers())
def test_a_training_option_that_is_no_number_is_refused_naming_its_flag(name, flag, value):
    """spacy-elmo train's options (TrainConfig, also given from Python or a resumed run's config): no number, or a
    number beyond what it can be, is a ValueError naming the flag, before anything trains."""
    from spacy_elmo.train.config import TrainConfig, check_config

    with pytest.raises(ValueError, match=f"^{flag} must be "):
        check_config(TrainConfig(train=[], **{name: value}))
