"""A module's tests are found by its name: ``spacy_elmo/**/X.py`` is tested in ``tests/**/test_X.py`` (or, in a
subpackage, ``test_<subpackage>_X.py``, e.g. ``compat/simple_elmo.py`` in ``tests/compat/test_compat_simple_elmo.py``,
or ``test_<group>_X.py`` after its first folder, e.g. ``train/corpus/layouts.py`` in
``tests/train/test_train_layouts.py``). Modules whose tests are shared with others, or named after what they test
rather than the file, are listed in SHARED below (test files by name, in whichever folder of tests/ they are): a new
module with neither fails here, and so does an entry left behind by a rename."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "spacy_elmo"
TESTS = ROOT / "tests"
# every test file by its name, in whichever folder of tests/ it is (tests/<group>/test_X.py)
TEST_FILES = {path.name for path in TESTS.rglob("test_*.py")}

# module (its path under spacy_elmo/) -> the test files that hold its tests, the main one first
SHARED: dict[str, tuple[str, ...]] = {
    # the top level: the public names, the entry points, the version
    "__init__.py": ("test_backend.py", "test_api_docs.py", "test_sklearn.py"),
    "__main__.py": ("test_embed_file.py", "test_distributed.py"),
    "about.py": ("test_packaging.py", "test_hub.py"),
    # cli/: the command line, its commands by kind, and what it prints
    "cli/__init__.py": ("test_cli_help.py", "test_entry_points.py"),
    "cli/__main__.py": ("test_entry_points.py",),
    "cli/typer_app.py": ("test_cli_help.py", "test_cli_errors.py"),
    "cli/help_text.py": ("test_cli_help.py",),
    "cli/input_files.py": ("test_cli_help.py",),
    "cli/vector_commands.py": ("test_embed_file.py", "test_compat_allennlp.py", "test_dask.py", "test_figures.py"),
    "cli/model_commands.py": ("test_download.py", "test_model_info.py", "test_model_table.py"),
    "cli/train_commands.py": ("test_train.py", "test_train_prepare.py", "test_spacy_adapt.py", "test_cli_help.py"),
    "runtime/configuration/validation.py": (
        "test_user_numbers.py",
        "test_windows.py",
        "test_train.py",
        "test_compat_simple_elmo.py",
        "test_compat_allennlp.py",
    ),
    "groundwork/machine.py": ("test_user_numbers.py",),  # the bounds of the checks of a user's numbers
    "groundwork/number_checks.py": ("test_user_numbers.py",),
    "bilm/file_formats.py": ("test_damaged_files.py",),  # every format's schema, mutated by the property test
    "groundwork/schema_check.py": ("test_damaged_files.py",),  # the one reader of a schema's file
    "sources/model_paths.py": ("test_backend.py", "test_manylangs.py", "test_download.py"),
    "sources/published.py": ("test_download.py", "test_manylangs.py"),
    "sources/download_checks.py": ("test_download.py",),
    "output/write_guard.py": ("test_embed_file.py", "test_train_safety.py"),
    "output/hdf5_layout.py": ("test_embed_file.py", "test_compat_allennlp.py"),
    "output/cluster.py": ("test_dask.py",),
    "output/argument_checks.py": ("test_cli_help.py", "test_embed_file.py", "test_dask.py"),
    "train/run/command_config.py": ("test_cli_help.py", "test_train.py"),
    "runtime/features/text_rows.py": ("test_sklearn.py", "test_dask.py"),
    "runtime/features/front_settings.py": ("test_settings.py", "test_sklearn.py", "test_dask.py"),
    "runtime/configuration/defaults.py": ("test_settings.py",),  # the defaults, held against every front end
    "sources/pinned_model.py": ("test_bundled_versions.py", "test_spacy_serialize.py"),
    "spacy/saved_model.py": ("test_spacy_serialize.py", "test_bundled_versions.py"),
    "runtime/features/mix.py": ("test_mix_pooling.py", "test_sklearn.py"),
    "runtime/features/pooling.py": ("test_mix_pooling.py", "test_sklearn.py"),
    "runtime/features/cosine.py": ("test_spacy_component.py", "test_front_end_bounds.py"),
    "similarity.py": ("test_front_end_bounds.py", "test_figures.py"),
    "plots.py": ("test_figures.py", "test_cli_errors.py", "test_cli_help.py"),
    # the groups: docstrings only (their modules are tested by name)
    "sources/__init__.py": ("test_download.py",),
    "runtime/__init__.py": ("test_backend.py",),
    "runtime/configuration/__init__.py": ("test_settings.py", "test_user_numbers.py"),
    "runtime/embedding/__init__.py": ("test_backend.py",),
    "runtime/features/__init__.py": ("test_mix_pooling.py",),
    "output/__init__.py": ("test_embed_file.py",),
    "groundwork/__init__.py": ("test_layering.py",),
    # bilm/: the exact biLM, its inference path and its files
    "bilm/__init__.py": ("test_inference_path.py", "test_weights.py"),
    "bilm/model.py": ("test_inference_path.py", "test_weights.py"),
    "bilm/options.py": ("test_weight_validation.py", "test_weights.py"),
    "bilm/encoder.py": ("test_char_cnn_trim.py", "test_inference_path.py", "test_mkl_prepacked.py"),
    "bilm/lstm.py": ("test_inference_path.py",),
    "bilm/inference.py": ("test_inference_path.py", "test_char_cnn_trim.py", "test_precision.py"),
    "bilm/manylangs_reader.py": ("test_manylangs.py",),
    "bilm/manylangs_files.py": ("test_manylangs.py", "test_torch_free_imports.py"),  # the names resolution needs
    "bilm/manylangs_tokens.py": ("test_manylangs.py", "test_onnx_manylangs.py"),  # the id rows, torch and ONNX alike
    # ForkSafeLock and the renewals in a forked child (bilm/threads.py re-exports them)
    "groundwork/fork_safety.py": ("test_threads.py", "test_torch_free_imports.py"),
    # the runner Protocol and torch's runner, behind the backend
    "runtime/embedding/runner.py": ("test_torch_free_imports.py", "test_backend.py"),
    "runtime/embedding/torch_runner.py": ("test_backend.py", "test_reliability.py", "test_precision.py"),
    "groundwork/file_names.py": ("test_written_files.py", "test_model_names.py"),  # the names spelled in one place
    # bilm/engine/: one conformance test over every engine
    "bilm/engine/__init__.py": ("test_engines.py",),
    "bilm/engine/contract.py": ("test_engines.py", "test_inference_path.py", "test_mkl_prepacked.py"),
    "bilm/engine/registry.py": ("test_engines.py", "test_precision.py"),
    "bilm/engine/plain.py": ("test_engines.py", "test_inference_path.py"),
    "bilm/engine/mkl.py": ("test_engines.py", "test_mkl_prepacked.py"),
    "bilm/engine/int8.py": ("test_engines.py", "test_precision.py", "test_cpu_support.py"),
    "groundwork/lazy_exports.py": ("test_cli_help.py",),  # the lazy package __init__ files: import cost, public names
    "bilm/engine/precisions.py": ("test_engines.py", "test_device_cache_keys.py", "test_windows.py"),
    "bilm/engine/onednn.py": ("test_engines.py", "test_precision.py", "test_mkl_prepacked.py"),
    "bilm/engine/step_loop.py": ("test_engines.py", "test_precision.py", "test_inference_path.py"),
    # compat/: the peers' APIs
    "compat/__init__.py": ("test_compat_allennlp.py",),
    "compat/allennlp/__init__.py": ("test_compat_allennlp.py",),
    "compat/allennlp/__main__.py": ("test_compat_allennlp.py",),
    "compat/allennlp/command.py": ("test_compat_allennlp.py",),
    "compat/allennlp/embedder.py": ("test_compat_allennlp.py",),
    "compat/allennlp/modules.py": ("test_compat_allennlp.py",),
    "compat/allennlp/stateful_lstm.py": ("test_compat_allennlp.py",),
    "compat/allennlp/util.py": ("test_compat_allennlp.py",),
    # spacy/: the component, its layers and its saved form
    "spacy/__init__.py": ("test_spacy_component.py",),
    "spacy/pipeline_component.py": ("test_spacy_component.py", "test_spacy_serialize.py"),
    "spacy/extensions.py": ("test_stored_layers.py", "test_spacy_component.py"),
    "spacy/hooks.py": ("test_spacy_component.py", "test_spacy_serialize.py"),
    "spacy/architectures.py": ("test_spacy_mix_layer.py", "test_spacy_training.py"),
    # train/: training, its data and its files
    "train/__init__.py": ("test_train.py",),
    "train/config.py": ("test_train.py", "test_train_safety.py"),
    "train/corpus/__init__.py": ("test_train_data.py",),  # its parts: docstrings only
    "train/network/__init__.py": ("test_train.py",),
    "train/output_folder/__init__.py": ("test_train_safety.py",),
    "train/run/__init__.py": ("test_train.py",),
    "train/corpus/batching.py": ("test_train_data.py",),
    "train/corpus/sentences.py": ("test_train_data.py",),
    "train/network/presets.py": ("test_train_data.py",),
    "train/network/language_model.py": ("test_train.py",),
    "train/run/trainer.py": ("test_train.py", "test_train_safety.py"),
    "train/run/launch.py": ("test_distributed.py", "test_train.py", "test_cli_help.py"),
    "train/run/evaluation.py": ("test_train.py", "test_train_safety.py"),
    "train/run/init_from.py": ("test_train.py", "test_train_safety.py"),
    "train/run/outputs.py": ("test_train_safety.py", "test_train.py", "test_distributed.py"),
    "train/output_folder/storage.py": ("test_train_safety.py", "test_train.py"),
    # onnx/: the export to ONNX and its torch-free runner, tested together (export, then run)
    "onnx/__init__.py": ("test_onnx_export.py",),
    "onnx/graph.py": ("test_onnx_export.py", "test_onnx_manylangs.py"),
    "onnx/manifest.py": ("test_onnx_export.py", "test_damaged_files.py", "test_onnx_manylangs.py"),
    "onnx/quantize.py": ("test_onnx_int8.py",),
    "onnx/runner.py": ("test_onnx_export.py", "test_onnx_manylangs.py"),
    "onnx/token_spelling.py": ("test_onnx_manylangs.py", "test_onnx_export.py"),
}


def modules() -> list[str]:
    return sorted(path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py"))


def by_name(module: str) -> list[str]:
    """The test files named after ``module``: ``test_X.py``, and in a subpackage ``test_<subpackage>_X.py`` (its
    folders joined by ``_``) or ``test_<group>_X.py`` (its first folder)."""
    *folders, file = module[: -len(".py")].split("/")
    if file == "__init__":
        return []
    names = [f"test_{file}.py"]
    if folders:
        names += [f"test_{'_'.join(folders)}_{file}.py", f"test_{folders[0]}_{file}.py"]
    return [name for name in dict.fromkeys(names) if name in TEST_FILES]


def test_every_module_has_its_test_file_or_an_entry():
    missing = [m for m in modules() if m not in SHARED and not by_name(m)]
    assert not missing, f"no tests/**/test_X.py and no entry in tests/project/test_layout.py's SHARED: {missing}"


def test_every_entry_names_an_existing_module_and_existing_test_files():
    gone = [m for m in SHARED if not (PACKAGE / m).is_file()]
    assert not gone, f"SHARED lists modules that no longer exist: {gone}"
    absent = {m: [t for t in tests if t not in TEST_FILES] for m, tests in SHARED.items()}
    assert not any(absent.values()), {m: t for m, t in absent.items() if t}


def test_no_entry_for_a_module_that_has_its_own_test_file():
    redundant = [m for m in SHARED if by_name(m)]
    assert not redundant, f"these have tests/**/test_X.py: drop their SHARED entry: {redundant}"
