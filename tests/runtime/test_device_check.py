"""A device this machine does not have: one ValueError naming the setting from every front end (validation.py's
resolve_device, the one check), one line and exit 2 from the command lines; never torch's RuntimeError or
AssertionError at the first tensor."""

import functools

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo import ElmoVectorizer, load_bilm
from spacy_elmo.cli import app
from spacy_elmo.compat.allennlp import ElmoEmbedder
from spacy_elmo.compat.allennlp.command import main as allennlp_main
from spacy_elmo.runtime.configuration.validation import _device_count, resolve_device

N_CUDA = torch.cuda.device_count()


def _refused_here() -> list:
    """Device strings this machine cannot run on, whatever it has: backends it lacks, the meta device, an index
    beyond its GPUs, spellings torch does not read."""
    devices = ["meta", "hpu", f"cuda:{N_CUDA}", "gpu", "cuda:x", "x" * 100_000]
    devices += [kind for kind in ("mps", "xpu") if not _device_count(kind)]  # torch 2.1: no torch.xpu
    if not N_CUDA:
        devices.append("cuda")
    return devices


REFUSED = _refused_here()
IDS = [{"gpu": "the-word-gpu"}.get(device, device) if len(device) < 20 else "a-100k-string" for device in REFUSED]


def _load_bilm(fixture_dir, device):
    load_bilm(fixture_dir, device=device)


def _vectorizer(fixture_dir, device):
    ElmoVectorizer(model=str(fixture_dir), device=device, tokenizer="whitespace").fit(["a b"])


@functools.cache
def _blank_nlp():
    import spacy

    return spacy.blank("en")  # shared: a refused add_pipe adds nothing


def _spacy_component(fixture_dir, device):
    _blank_nlp().add_pipe("elmo", config={"model": str(fixture_dir), "device": device})


def _manylangs_embedder(fixture_dir, device):
    from spacy_elmo.compat.elmoformanylangs import Embedder

    Embedder(str(fixture_dir), device=device)


FRONT_ENDS = [_load_bilm, _vectorizer, _spacy_component, _manylangs_embedder]


def _check_message(message: str, given: str) -> None:
    assert message.startswith(given), message
    assert "\n" not in message and len(message) < 300, message  # a 100k-character device: an excerpt of it
    assert "use 'cpu'" in message, message


@pytest.mark.parametrize("device", REFUSED, ids=IDS)
@pytest.mark.parametrize("front_end", FRONT_ENDS, ids=lambda f: f.__name__.strip("_"))
def test_every_front_end_refuses_a_device_this_machine_lacks_naming_it(fixture_dir, front_end, device):
    with pytest.raises(ValueError) as err:
        front_end(fixture_dir, device)
    _check_message(str(err.value), f"device={device[:20]!r}"[:-1])


@pytest.mark.parametrize("device", REFUSED, ids=IDS)
def test_the_check_says_what_is_missing(device):
    with pytest.raises(ValueError) as err:
        resolve_device(device)
    message = str(err.value)
    if device == "meta":
        assert "holds shapes but no values" in message
    elif device in ("mps", "xpu", "hpu", "cuda"):
        assert "is not available on this machine" in message
    elif device == f"cuda:{N_CUDA}":
        assert ("is not available" if not N_CUDA else f"this machine has {N_CUDA} CUDA device") in message
    else:
        assert "is not a torch device" in message


def test_the_cpu_and_none_pass():
    assert resolve_device(None) == resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("device", REFUSED, ids=IDS)
def test_spacy_elmo_embed_device_is_one_line_exit_2(fixture_dir, tmp_path, device):
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    args = ["embed", str(source), str(tmp_path / "out.hdf5"), "--model", str(fixture_dir), "--device", device]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    _check_message(lines[0].removeprefix("error: "), f"device={device[:20]!r}"[:-1])
    assert not (tmp_path / "out.hdf5").exists()


# AllenNLP's cuda_device: -1 is the CPU, N the GPU cuda:N; N_CUDA is one past this machine's last GPU (0: none)


def test_allennlp_elmo_embedder_refuses_a_gpu_this_machine_lacks(fixture_dir, cuda_device=N_CUDA):
    with pytest.raises(ValueError) as err:
        ElmoEmbedder(str(fixture_dir / "options.json"), str(fixture_dir / "lm_weights.hdf5"), cuda_device)
    message = str(err.value)
    assert message.startswith(f"cuda_device={cuda_device}: ") and "use -1 (the CPU)" in message, message


def _allennlp_args(fixture_dir, tmp_path, cuda_device):
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    files = ["--options-file", str(fixture_dir / "options.json"), "--weight-file", str(fixture_dir / "lm_weights.hdf5")]
    return [str(source), str(tmp_path / "out.hdf5"), "--all", *files, "--cuda-device", str(cuda_device)]


def test_allennlp_elmo_command_cuda_device_is_one_line_exit_2(fixture_dir, tmp_path, capsys, cuda_device=N_CUDA):
    """``python -m spacy_elmo.compat.allennlp`` (argparse's way: its prog, "error:", exit 2) and
    ``spacy-elmo allennlp-elmo`` alike."""
    args = _allennlp_args(fixture_dir, tmp_path, cuda_device)
    with pytest.raises(SystemExit) as exit_:
        allennlp_main(prog="python -m spacy_elmo.compat.allennlp", argv=args)
    assert exit_.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.startswith(f"python -m spacy_elmo.compat.allennlp: error: cuda_device={cuda_device}: "), stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    result = CliRunner().invoke(app, ["allennlp-elmo", *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output, result.output
    assert f"error: cuda_device={cuda_device}: " in result.output, result.output
    assert not (tmp_path / "out.hdf5").exists()


def test_on_a_machine_with_two_gpus_an_index_beyond_them_names_those_there(monkeypatch):
    """The branch a CUDA machine takes, on any machine: torch's answers made those of one with two GPUs."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError) as err:
        resolve_device("cuda:2")
    assert str(err.value) == (
        "device='cuda:2': this machine has 2 CUDA devices (cuda:0 .. cuda:1); use 'cpu' (the CPU) or one of those"
    )
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    if not torch.backends.mps.is_available():
        with pytest.raises(
            ValueError,
            match=r"^device='mps': MPS \(Apple's GPU\) is not available on this machine; "
            r"use 'cpu' \(the CPU\) or 'cuda'$",
        ):
            resolve_device("mps")
