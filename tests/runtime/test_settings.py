"""``runtime/configuration/defaults.py`` holds the front ends' and the backend's defaults: no front end spells one as a
literal (read from the source), each setting is used, and what the front ends and the backend start with is its
value."""

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from spacy_elmo.runtime.configuration import defaults as settings

PACKAGE = Path(__file__).resolve().parents[2] / "spacy_elmo"

# a parameter, dataclass field or attribute of one of these names takes a setting: its default is settings.py's
SETTING_NAMES = {
    "batch_size": "DEFAULT_BATCH_SIZE (DEFAULT_PIPE_BATCH_SIZE: docs per pipe batch)",
    "token_budget": "DEFAULT_TOKEN_BUDGET",
    "max_length": "DEFAULT_MAX_LENGTH",
    "window_overlap": "DEFAULT_OVERLAP",
    "overlap": "DEFAULT_OVERLAP",
    "max_tokens": "MAX_TOKENS_PER_CALL",
    "precision": "DEFAULT_PRECISION",
    "layers": "DEFAULT_LAYERS",
    "gamma": "DEFAULT_GAMMA",
    "cache_mb": "DEFAULT_MEMORY_MB",
    "max_mb": "DEFAULT_MEMORY_MB or DEFAULT_DISK_MB",
    "disk_cache_mb": "DEFAULT_DISK_MB",
    "token_cache_size": "DEFAULT_TOKEN_CACHE",
}
# not front ends: train/ (training's defaults are train/config.py's), compat/ (the defaults of the tools it stands in
# for, e.g. simple_elmo's max_batch_size=32 and layers="average"). bilm/ is checked too: it cannot import settings
# (it imports nothing of the package), so a setting reaches it as an argument, never as a default of its own
NOT_FRONT_ENDS = ("train", "compat")
# (module, function, name): literal defaults that are no setting's default
EXEMPT = {
    # 0 with max_length=None: no windows, nothing overlaps
    ("runtime/embedding/windows.py", "embed_segments", "overlap"),
    ("runtime/embedding/windows.py", "fold_segments", "overlap"),
}


def front_end_modules() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in NOT_FRONT_ENDS
        and path.relative_to(PACKAGE).as_posix() != "runtime/configuration/defaults.py"
    ]


def _literal(node: ast.AST) -> bool:
    """A number or string written out (``None``, "no value", is no default of a setting)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and node.value is not None and node.value is not Ellipsis


def _called_name(call: ast.Call) -> str:
    """``Option`` for ``typer.Option(...)`` and ``Option(...)``: the name a call ends in."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def literal_defaults(source: str, module: str = "") -> list[tuple[int, str, str, object]]:
    """``(line, function or class, name, value)`` of each setting's default spelled as a literal in ``source``: a
    parameter's (or a typer/Thinc ``Option(default, ...)``'s first argument), a class field's, an attribute's."""
    found = []

    def check(node: ast.AST, owner: str, name: str, default: ast.AST) -> None:
        if name not in SETTING_NAMES or (module, owner, name) in EXEMPT:
            return
        if isinstance(default, ast.Call) and default.args and _called_name(default) in ("Option", "Argument"):
            default = default.args[0]  # typer.Option(64, help=...)
        if _literal(default):
            found.append((default.lineno, owner, name, ast.literal_eval(default)))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
            pairs += [(arg, d) for arg, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                check(node, node.name, arg.arg, default)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    check(item, node.name, item.target.id, item.value)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute):
                    check(node, "", target.attr, node.value)
    return found


def test_the_check_finds_literal_defaults():
    source = """
class Options:
    batch_size: int = 32
    gamma: float = DEFAULT_GAMMA

def embed(texts, max_length=128, *, precision="float32", layers=DEFAULT_LAYERS, overlap=None):
    self.token_budget = 4096
    self.token_budget = DEFAULT_TOKEN_BUDGET
    self.max_mb = max(0, int(max_mb))

def command(batch_size: int = typer.Option(64, help="..."), cache_mb: float = -1.0):
    pass

def train(max_length: int = _config_option("max_length"), token_budget: int = typer.Argument(4096)):
    pass
"""
    found = {(owner, name, value) for _, owner, name, value in literal_defaults(source)}
    assert found == {
        ("Options", "batch_size", 32),
        ("embed", "max_length", 128),
        ("embed", "precision", "float32"),
        ("", "token_budget", 4096),
        ("command", "batch_size", 64),
        ("command", "cache_mb", -1.0),
        ("train", "token_budget", 4096),  # the name of the field an option comes from is no default
    }


@pytest.mark.parametrize("path", front_end_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_front_ends_take_their_defaults_from_settings(path):
    module = str(path.relative_to(PACKAGE))
    found = literal_defaults(path.read_text(encoding="utf-8"), module)
    fix = "take it as an argument (bilm/ imports no settings)" if module.startswith("bilm") else "import settings.{}"
    assert not found, "\n".join(
        f"{module}:{line} {owner or 'attribute'} {name}={value!r}: {fix.format(SETTING_NAMES[name])} instead"
        for line, owner, name, value in found
    )


def test_the_spacy_config_takes_its_values_from_settings():
    """The component's default config is an f-string whose settings lines come from the shared settings' spec
    (``front_settings.config_lines``): no setting's value written into its text."""
    from spacy_elmo.runtime.features.front_settings import COMPONENT_DEFAULTS, COMPONENT_SETTINGS
    from spacy_elmo.spacy.pipeline_component import DEFAULT_CONFIG

    path = PACKAGE / "spacy" / "pipeline_component.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (config,) = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DEFAULT_CONFIG_STR" for t in node.targets)
    ]
    assert isinstance(config, ast.JoinedStr)
    text = "".join(part.value if isinstance(part, ast.Constant) else "{}" for part in config.values)
    written = [line for line in text.splitlines() if line.split(" = ")[0] in SETTING_NAMES]
    assert not written, f"write these from the settings' spec: {written}"
    assert {name: DEFAULT_CONFIG["elmo"][name] for name in COMPONENT_SETTINGS} == {
        name: getattr(COMPONENT_DEFAULTS, name) for name in COMPONENT_SETTINGS
    }


def test_every_setting_is_used_outside_settings():
    names = [name for name in vars(settings) if name.isupper()]
    assert len(names) >= 12
    sources = "\n".join(p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py") if p.name != "settings.py")
    unused = [name for name in names if not re.search(rf"\b{name}\b", sources)]
    assert not unused, f"settings no module uses: {unused}"


def test_the_values_are_the_ones_the_front_ends_have_always_used(tmp_path):
    """What the front ends and the backend's caches start with, read from their objects."""
    import spacy

    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.runtime.embedding.cache import DiskCache, MemoryCache
    from spacy_elmo.spacy.pipeline_component import DEFAULT_CONFIG

    config = DEFAULT_CONFIG["elmo"]
    assert (config["batch_size"], config["max_length"], config["window_overlap"]) == (64, 128, 32)
    assert (config["layers"], config["gamma"], config["precision"]) == ("average", 1.0, "float32")
    component = spacy.blank("en").add_pipe("elmo")
    assert (component.batch_size, component.max_length, component.window_overlap) == (64, 128, 32)
    vectorizer = ElmoVectorizer()
    assert (vectorizer.layers, vectorizer.max_length, vectorizer.window_overlap) == ("average", 128, 32)
    assert MemoryCache().max_mb == 256.0 and DiskCache(tmp_path).max_bytes == 4096 * 2**20
    # the backend's, set in ElmoBackend.__init__ (a loaded backend may have been reconfigured since)
    assert (settings.DEFAULT_TOKEN_BUDGET, settings.DEFAULT_TOKEN_CACHE, settings.MAX_TOKENS_PER_CALL) == (
        4096,
        20000,
        16384,
    )
    assert settings.DEFAULT_PIPE_BATCH_SIZE == 128


def settings_imports(source: str) -> list[int]:
    """The lines of ``source`` that import from ``runtime/configuration/defaults.py``
    (``from ...runtime.configuration.defaults import ...``, ``from ..runtime.configuration import defaults``), lazy ones
    included."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            named = {alias.name for alias in node.names}
            last = module.split(".")[-1]
            if last == "defaults" or (last == "configuration" and "defaults" in named):
                lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(
            a.name.endswith("runtime.configuration.defaults") for a in node.names
        ):
            lines.append(node.lineno)
    return lines


def test_the_import_scan_sees_settings_imports():
    source = """
from ...runtime.configuration.defaults import DEFAULT_BATCH_SIZE
from ..runtime.configuration import defaults, validation
def f():
    from ..runtime.configuration.validation import positive_int
    import spacy_elmo.runtime.configuration.defaults
"""
    assert settings_imports(source) == [2, 3, 6]


def test_compat_keeps_the_defaults_of_the_tools_it_stands_in_for():
    """compat/ takes no default from runtime/configuration/defaults.py, so that a change of this package's defaults
    never changes another tool's API; its defaults are the tools' own, as their code has them."""
    import inspect

    from spacy_elmo.compat.allennlp import DEFAULT_BATCH_SIZE, ElmoEmbedder
    from spacy_elmo.compat.elmoformanylangs import Embedder
    from spacy_elmo.compat.simple_elmo import ElmoModel

    for path in sorted((PACKAGE / "compat").rglob("*.py")):
        lines = settings_imports(path.read_text(encoding="utf-8"))
        assert not lines, (
            f"compat/{path.relative_to(PACKAGE / 'compat')}:{lines} imports runtime/configuration/defaults.py: "
            + ("spell the default of the tool it stands in for")
        )

    def default(function, name):
        return inspect.signature(function).parameters[name].default

    assert DEFAULT_BATCH_SIZE == 64  # allennlp.commands.elmo.DEFAULT_BATCH_SIZE (AllenNLP 0.9)
    assert default(ElmoEmbedder.embed_sentences, "batch_size") == default(ElmoEmbedder.embed_file, "batch_size") == 64
    assert default(Embedder, "batch_size") == 64  # elmoformanylangs.Embedder(model_dir, batch_size=64)
    assert default(ElmoModel.load, "max_batch_size") == 32  # simple_elmo's ElmoModel.load(max_batch_size=32)
    assert default(ElmoModel.get_elmo_vectors, "layers") == "average"


# -- the front ends' shared settings: declared once (runtime/features/front_settings.py), spelled out only where
# conventions require it (scikit-learn's __init__, spaCy's factory and component), with the declaration's defaults


def disagreements(function, names, defaults, own=()) -> list[str]:
    """How ``function``'s parameters differ from the settings ``names`` at ``defaults`` (``own``: its other
    parameters): a setting missing, one more than declared, a default not the declaration's."""
    import inspect

    from spacy_elmo.runtime.features.front_settings import FrontSettings

    parameters = {name: p for name, p in inspect.signature(function).parameters.items() if p.kind is not p.VAR_KEYWORD}
    fields = {field.name for field in dataclasses.fields(FrontSettings)}
    found = []
    for name in names:
        if name not in parameters:
            found.append(f"{name}: declared but not a parameter")
        elif parameters[name].default is not inspect.Parameter.empty and parameters[name].default != getattr(
            defaults, name
        ):
            found.append(f"{name}: default {parameters[name].default!r}, declared {getattr(defaults, name)!r}")
    for name in set(parameters) - set(names) - set(own):
        found.append(f"{name}: a parameter no declaration names" + (" (a shared setting)" if name in fields else ""))
    return found


def test_the_front_ends_signatures_agree_with_the_settings_spec():
    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.dask import embed_texts, embed_tokens
    from spacy_elmo.runtime.features import front_settings as spec
    from spacy_elmo.spacy.pipeline_component import DEFAULT_CONFIG, ElmoComponent, make_elmo

    # dtype: precision's name up to 0.2.0, deprecated (a parameter of each, no setting)
    component_own = ("self", "vocab", "nlp", "name", "model", "use_sentences", "set_vectors", "get_positions")
    problems = {
        "ElmoVectorizer": disagreements(
            ElmoVectorizer.__init__, spec.VECTORIZER_SETTINGS, spec.FrontSettings(), ("self", "model", "dtype")
        ),
        "ElmoComponent": disagreements(
            ElmoComponent.__init__, spec.COMPONENT_SETTINGS, spec.COMPONENT_DEFAULTS, (*component_own, "dtype")
        ),
        "make_elmo": disagreements(
            make_elmo, spec.COMPONENT_SETTINGS, spec.COMPONENT_DEFAULTS, (*component_own, "dtype")
        ),
        "the config": sorted(set(DEFAULT_CONFIG["elmo"]) ^ {*spec.COMPONENT_SETTINGS, *component_own[5:], "model"}),
        # Dask passes the settings on (**settings): it spells none of them
        "embed_texts": disagreements(embed_texts, (), spec.FrontSettings(), ("texts", "model", "cache_dir", "lengths")),
        "embed_tokens": disagreements(embed_tokens, (), spec.FrontSettings(), ("texts", "model", "cache_dir")),
    }
    assert not {where: found for where, found in problems.items() if found}
    declared = {field.name for field in dataclasses.fields(spec.FrontSettings)}
    used = set(spec.VECTORIZER_SETTINGS) | set(spec.COMPONENT_SETTINGS)
    assert declared == used, f"declared but no front end takes them: {declared - used}"


def test_the_signatures_type_each_setting_as_its_declaration_does():
    """The component's batch size and precision were typed int and str against a declaration of the vectorizer's
    Optional ones, their defaults under ``# type: ignore``: the component's differences are declared
    (ComponentSettings), and every signature's types agree with its declaration."""
    import inspect
    import sys

    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.runtime.features import front_settings as spec
    from spacy_elmo.spacy.pipeline_component import ElmoComponent, make_elmo

    def evaluated(annotation, module):  # a postponed annotation (a string) as the type it names
        return eval(annotation, vars(sys.modules[module])) if isinstance(annotation, str) else annotation

    def declared(declaration, names, skip=()):
        types = {field.name: evaluated(field.type, declaration.__module__) for field in dataclasses.fields(declaration)}
        return {name: types[name] for name in names if name not in skip}

    def spelled(function, names, skip=()):
        parameters = inspect.signature(function).parameters
        return {name: evaluated(parameters[name].annotation, function.__module__) for name in names if name not in skip}

    component = type(spec.COMPONENT_DEFAULTS)
    # spaCy validates a config against the factory's own types: its layers are spelled out (LayerMix's members)
    checks = [
        (ElmoVectorizer.__init__, spec.FrontSettings, spec.VECTORIZER_SETTINGS, ()),
        (ElmoComponent.__init__, component, spec.COMPONENT_SETTINGS, ()),
        (make_elmo, component, spec.COMPONENT_SETTINGS, ("layers",)),
    ]
    for function, declaration, names, skip in checks:
        assert spelled(function, names, skip) == declared(declaration, names, skip), function.__qualname__
        header = inspect.getsource(function).split('"""', 1)[0]  # the signature, up to the docstring
        assert "type: ignore" not in header, f"{function.__qualname__}: a default that fights its declaration"


def test_the_component_checks_its_own_settings_when_it_is_made():
    import numpy as np

    from spacy_elmo.runtime.features.front_settings import ComponentSettings

    checked = ComponentSettings(device="", batch_size=np.int64(8)).checked()
    assert checked == ComponentSettings(device=None, batch_size=8) and type(checked.batch_size) is int
    with pytest.raises(ValueError, match="batch_size=None: expected a positive integer"):
        ComponentSettings(batch_size=None).checked()
    with pytest.raises(ValueError, match="device='gpu' is not a torch device"):
        ComponentSettings(device="gpu").checked()


def test_the_agreement_check_fires_on_a_setting_added_in_one_place_only():
    from spacy_elmo.runtime.features import front_settings as spec

    def added_here_only(
        self,
        model="default",
        layers="average",
        pooling="mean",
        batch_size=None,
        device=None,
        tokenizer=None,
        max_length=128,
        window_overlap=32,
        verbose=None,
        precision=None,
        norm=None,
        stride=2,
    ):
        pass

    def other_default(
        self,
        model="default",
        layers="top",
        pooling="mean",
        batch_size=None,
        device=None,
        tokenizer=None,
        max_length=128,
        window_overlap=32,
        verbose=None,
        precision=None,
        norm=None,
    ):
        pass

    assert disagreements(added_here_only, spec.VECTORIZER_SETTINGS, spec.FrontSettings(), ("self", "model")) == [
        "stride: a parameter no declaration names"
    ]
    assert disagreements(other_default, spec.VECTORIZER_SETTINGS, spec.FrontSettings(), ("self", "model")) == [
        "layers: default 'top', declared 'average'"
    ]


def test_dask_refuses_a_setting_it_does_not_take():
    from spacy_elmo.runtime.features.front_settings import DASK_TOKEN_SETTINGS, given_settings

    with pytest.raises(TypeError, match="embed_tokens\\(\\) got an unexpected setting 'pooling'"):
        given_settings({"pooling": "max"}, DASK_TOKEN_SETTINGS, "embed_tokens")


def documented_defaults(docstring: str) -> dict[str, str]:
    """``name: default`` of each numpydoc parameter line (``name : type, default=VALUE``) of ``docstring``."""
    found = re.findall(r"^\s{4}(\w+) : [^\n]*?, default=([^\n]+)$", docstring, flags=re.MULTILINE)
    return dict(found)


def test_the_vectorizers_documented_defaults_are_the_declarations():
    """The numpydoc lines of ``ElmoVectorizer`` spell each setting's default (scikit-learn's convention): each is the
    declaration's (``front_settings.FrontSettings``), so that a default changed there cannot leave the docs behind."""
    from spacy_elmo import ElmoVectorizer
    from spacy_elmo.runtime.configuration.validation import DEPRECATED
    from spacy_elmo.runtime.features.front_settings import VECTORIZER_SETTINGS, FrontSettings

    documented = documented_defaults(ElmoVectorizer.__doc__ or "")
    assert documented.pop("model") == '"default"'
    assert documented.pop("dtype") == repr(DEPRECATED).replace("'", '"')  # precision's deprecated name
    assert set(documented) == set(VECTORIZER_SETTINGS), "a setting documented without its default, or one too many"
    declared = FrontSettings()
    wrong = {
        name: (text, getattr(declared, name))
        for name, text in documented.items()
        if ast.literal_eval(text) != getattr(declared, name)
    }
    assert not wrong, f"documented default, declared default: {wrong}"


def test_the_documented_defaults_check_reads_numpydoc_lines():
    doc = """
    Parameters
    ----------
    max_length : int or None, default=128
        Texts longer than this.
    pooling : {"mean", "max"}, default="mean"
    """
    assert documented_defaults(doc) == {"max_length": "128", "pooling": '"mean"'}
