"""Training, adapting and evaluating on a chosen device: ``--device`` read in one place and checked, every tensor of the
fused biLSTM on its input's device, and (marker ``gpu``) the training step, mixed precision, resume and the process
group on a CUDA GPU."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from spacy_elmo.bilm import cpu_support
from spacy_elmo.cli import app
from spacy_elmo.train import Trainer, train
from spacy_elmo.train.distributed import World, training_device
from spacy_elmo.train.network import precision as precision_module
from spacy_elmo.train.network.packed_lstm import packed_bilstm_layer
from spacy_elmo.train.output_folder.storage import load_checkpoint, save_checkpoint
from tests.conftest import torch_threads
from tests.train.conftest import wikitext_lines


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    return wikitext_lines(data_dir, tmp_path_factory.mktemp("texts"), train=200, valid=60)


@pytest.fixture(scope="module")
def tiny_options():
    """float32 (the exact path on either device) at a smaller learning rate."""
    return dict(min_count=2, token_budget=1024, max_length=40, lr=5e-3, precision="float32")


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as one without a GPU, whatever it has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine whose torch sees two CUDA GPUs (only what training_device asks of torch.cuda)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


# -- the fused biLSTM's tensors follow its input ------------------------------------------------------------------


def _layer_inputs(device: torch.device, seed: int = 0):
    """One layer's packed input and weights (input 6, cell 10, projection 4), rows of lengths 4, 2, 1."""
    generator = torch.Generator().manual_seed(seed)

    def tensor(*shape: int) -> torch.Tensor:
        return (torch.rand(*shape, generator=generator) - 0.5).to(device).requires_grad_()

    batch_sizes = [3, 2, 1, 1]
    return (tensor(2, 7, 6), tensor(2, 40, 6), tensor(2, 40, 4), tensor(2, 40), tensor(2, 4, 10)), batch_sizes


@pytest.mark.parametrize("compute_dtype", [torch.float32, torch.bfloat16])
def test_the_fused_layer_allocates_every_tensor_on_its_inputs_device(compute_dtype):
    """On the ``meta`` device (shapes only, no data) every tensor the forward and the hand-written backward make must
    be a meta tensor: one made without ``device=`` lands on the CPU and the layer stops with a cross-device error, as
    a CUDA input did under bfloat16."""
    tensors, batch_sizes = _layer_inputs(torch.device("meta"))
    out = packed_bilstm_layer(*tensors, batch_sizes, compute_dtype)
    assert out.device.type == "meta" and out.shape == (2, 7, 4) and out.dtype == torch.float32
    grads = torch.autograd.grad(out.sum(), tensors)
    for grad, tensor in zip(grads, tensors):
        assert grad.device.type == "meta" and grad.shape == tensor.shape and grad.dtype == torch.float32


# -- --device: one reading, one clear error ----------------------------------------------------------------------


def test_cpu_and_auto_without_a_gpu_train_on_the_cpu(no_cuda):
    for requested in (None, "cpu", "auto", torch.device("cpu")):
        assert training_device(requested) == torch.device("cpu")


def test_cuda_without_a_gpu_is_refused_by_name(no_cuda):
    for requested in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(ValueError, match=rf"--device {requested}: torch sees no CUDA GPU here .*use --device cpu"):
            training_device(requested)


@pytest.mark.parametrize("requested", ["gpu:0", "cuda:x", "cuda:-1", "mps", ""])
def test_other_devices_are_refused_with_the_choices(requested):
    with pytest.raises(ValueError, match="--device must be cpu, cuda, cuda:N or auto"):
        training_device(requested)


def test_cuda_names_the_gpu_and_several_processes_take_one_each(two_gpus):
    assert training_device("auto") == torch.device("cuda", 0)
    assert training_device("cuda") == torch.device("cuda", 0)
    assert training_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(ValueError, match=r"torch sees 2 CUDA GPU\(s\), cuda:0 \.\. cuda:1"):
        training_device("cuda:2")
    # torchrun / --processes: local rank k on cuda:k
    assert [training_device("cuda", rank, 2) for rank in range(2)] == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert training_device("auto", 1, 2) == torch.device("cuda", 1)
    assert training_device("cpu", 1, 2) == torch.device("cpu")
    with pytest.raises(ValueError, match="--device cuda:1 names one GPU, but 2 training processes share this machine"):
        training_device("cuda:1", 1, 2)
    with pytest.raises(ValueError, match="3 training processes on this machine need a GPU each, and torch sees 2"):
        training_device("cuda", 0, 3)


def test_a_trainer_on_a_world_takes_its_device_and_refuses_another(texts, tiny_config, tmp_path, two_gpus):
    world = World(1, 2, 1, 2, "nccl", torch.device("cuda", 1))
    with pytest.raises(ValueError, match=r"--device cpu: the training processes joined their group on cuda:1"):
        Trainer(tiny_config(*texts), tmp_path / "m", world=world, device="cpu")
    with pytest.raises(ValueError, match="--device cuda:0 names one GPU, but 2 training processes share this machine"):
        Trainer(tiny_config(*texts), tmp_path / "m", world=world, device="cuda:0")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["train", "{out}", "--train", "{train}", "--arch", "tiny"],
        ["evaluate", "default", "{train}"],
        ["adapt", "{out}", "--train", "{train}.spacy", "--dev", "{train}.spacy"],
    ],
)
def test_the_commands_refuse_a_missing_gpu_in_one_line_and_write_nothing(texts, tmp_path, no_cuda, command):
    out = tmp_path / "model"
    Path(f"{texts[0]}.spacy").touch()  # adapt's inputs exist (a missing one is refused first, by name)
    args = [part.format(out=out, train=texts[0]) for part in command]
    result = CliRunner().invoke(app, [*args, "--device", "cuda"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --device cuda: torch sees no CUDA GPU here (torch {torch.__version__}, built for CUDA "
        f"{torch.version.cuda or 'none'}): use --device cpu, or install a CUDA build of torch"
    ]
    assert not out.exists()


def test_train_with_auto_on_a_machine_without_a_gpu_trains_on_the_cpu_and_says_so(texts, tmp_path, no_cuda):
    out = tmp_path / "model"
    args = ["train", str(out), "--train", str(texts[0]), "--arch", "tiny", "--max-steps", "2", "--no-progress"]
    with torch_threads(1):
        result = CliRunner().invoke(app, [*args, "--threads", "1", "--token-budget", "512", "--device", "auto"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.json").read_text())["device"] == "cpu"


def test_processes_on_gpus_need_one_gpu_each_before_any_starts(tmp_path, two_gpus):
    (tmp_path / "t.txt").write_text("a b c\n", encoding="utf-8")  # the sources are checked first
    result = CliRunner().invoke(
        app, ["train", str(tmp_path / "m"), "--train", str(tmp_path), "--processes", "3", "--device", "cuda"]
    )
    assert result.exit_code == 2, result.output
    assert "3 training processes on this machine need a GPU each, and torch sees 2" in result.output


def test_a_gpu_checkpoint_resumes_on_the_cpu_without_the_gpus_generator(texts, tiny_config, tmp_path):
    """A GPU run's checkpoint holds the GPU generator's state besides the CPU's. Resumed on the CPU it is set aside
    (dropout there draws from the CPU's generator, restored as always): the run continues as the uninterrupted CPU run
    does, bit for bit, and its own checkpoints no longer carry a GPU state."""
    config = dict(dropout=0.1, checkpoint_every=1)  # no validation
    with torch_threads(1):
        train(tiny_config(texts[0], **config, max_steps=4), tmp_path / "straight", progress=False)
        train(tiny_config(texts[0], **config, max_steps=2), tmp_path / "split", progress=False)
        path = tmp_path / "split" / "checkpoint.safetensors"
        saved = load_checkpoint(path)
        state = {**saved.info["state"], "cuda_rng_state": list(range(16))}  # as a GPU run writes it
        save_checkpoint(path, saved.model, saved.optimizer, saved.rng, {**saved.info, "state": state})
        train(
            tiny_config(texts[0], **config, max_steps=4), tmp_path / "split", resume=True, progress=False, device="cpu"
        )
    resumed = load_checkpoint(path)
    assert resumed.info["state"]["step"] == 4 and "cuda_rng_state" not in resumed.info["state"]
    straight = _state(tmp_path / "straight")
    for name in straight:
        assert torch.equal(resumed.model[name], straight[name]), name


# -- precision on a GPU ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "expected"), [((9, 0), torch.bfloat16), ((8, 0), torch.bfloat16), ((7, 5), torch.float32)]
)
def test_auto_takes_bfloat16_on_gpus_with_native_bfloat16_only(monkeypatch, capability, expected):
    """Compute capability 8.0 (A100) and later have bfloat16 arithmetic; a T4 (7.5) would run it emulated. The CPU's
    answer does not decide for a GPU."""
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Test")
    monkeypatch.setattr(cpu_support, "bf16_native", lambda: expected != torch.bfloat16)  # the CPU says the opposite
    assert precision_module.training_dtype("auto", gpu) == expected
    line = precision_module.describe("auto", expected, gpu)
    why = "native bfloat16 kernels" if expected == torch.bfloat16 else "no native bfloat16 kernels"
    assert line.endswith(f"(auto: {why} on cuda:0: NVIDIA Test)")
    if expected == torch.float32:
        with pytest.warns(cpu_support.SlowPrecisionWarning, match=r"no native arithmetic on NVIDIA Test .*7\.5"):
            precision_module.warn_if_emulated(torch.bfloat16, gpu)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            precision_module.warn_if_emulated(torch.bfloat16, gpu)


# -- on a CUDA GPU (marker gpu) -----------------------------------------------------------------------------------

GPU = pytest.mark.gpu


def _state(directory: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(directory / "checkpoint.safetensors").model


@GPU
def test_the_fused_layer_on_cuda_matches_the_cpu_and_ignores_a_users_autocast():
    """float32 on the GPU: the CPU's outputs and gradients to float32 rounding (1e-5 of each tensor's largest value,
    TF32 off: bilm/exact.py); under a user's ``torch.autocast("cuda")`` (float16) the layer still computes in float32,
    forward and backward (the same numbers bit for bit); bfloat16 products within bfloat16's rounding."""
    from spacy_elmo.bilm.exact import exact_float32

    cpu_inputs, batch_sizes = _layer_inputs(torch.device("cpu"))
    gpu = torch.device("cuda", 0)
    gpu_inputs, _ = _layer_inputs(gpu)
    upstream = torch.rand(2, 7, 4, generator=torch.Generator().manual_seed(1)) - 0.5

    def run(inputs, compute_dtype=torch.float32):
        out = packed_bilstm_layer(*inputs, batch_sizes, compute_dtype)
        grads = torch.autograd.grad((out * upstream.to(out.device)).sum(), inputs)
        return [t.detach().cpu() for t in (out, *grads)]

    expected = run(cpu_inputs)
    with exact_float32(gpu):
        plain = run(gpu_inputs)
        with torch.autocast("cuda", dtype=torch.float16):
            cast = run(gpu_inputs)
        bf16 = run(gpu_inputs, torch.bfloat16)
    for want, got, under_autocast, low in zip(expected, plain, cast, bf16):
        scale = float(want.abs().max())
        assert float((got - want).abs().max()) <= 1e-5 * scale
        assert torch.equal(under_autocast, got)
        assert float((low - want).abs().max()) <= 3e-2 * scale  # bfloat16 operands: 2^-9 each, a few products deep


@GPU
def test_float32_training_on_cuda_follows_the_cpus_and_exports_a_cpu_model(texts, tiny_config, tmp_path):
    """Three float32 steps on the GPU and on the CPU from the same seed and batches. In its first three steps Adam moves
    a weight by at most 1.004 x the learning rate (|m / sqrt(v)| after bias correction, by Cauchy-Schwarz over the two
    averages' weights), so however the two devices round, no weight can differ by more than twice that, summed over
    the warm-up's learning rates (a weight whose gradient is at rounding level may step either way); the validation
    perplexity agrees to 1%."""
    config = dict(max_steps=3, warmup_steps=3, lr=5e-3, checkpoint_every=0)
    metrics = {}
    for device in ("cpu", "cuda"):
        with torch_threads(1):
            metrics[device] = train(tiny_config(*texts, **config), tmp_path / device, progress=False, device=device)
    assert metrics["cuda"]["device"].startswith("cuda:0 (") and metrics["cpu"]["device"] == "cpu"
    bound = 2 * 1.004 * sum(5e-3 * step / 3 for step in (1, 2, 3))
    cpu, gpu = _state(tmp_path / "cpu"), _state(tmp_path / "cuda")
    assert cpu.keys() == gpu.keys()
    for name in cpu:
        assert gpu[name].device.type == "cpu"  # safetensors reads to the CPU
        assert float((gpu[name] - cpu[name]).abs().max()) <= bound, name
    for key in ("valid_ppl_forward", "valid_ppl_backward"):
        assert metrics["cuda"]["best"][key] == pytest.approx(metrics["cpu"]["best"][key], rel=1e-2)
    # the exported model is an ordinary float32 model: the CPU evaluates it
    from spacy_elmo.train.run.evaluation import evaluate

    on_cpu = evaluate(tmp_path / "cuda", [texts[1]], device="cpu")
    on_gpu = evaluate(tmp_path / "cuda", [texts[1]], device="cuda")
    assert on_gpu["mean"] == pytest.approx(on_cpu["mean"], rel=1e-4)


@GPU
def test_a_cuda_run_resumes_bit_exact_on_the_gpu_and_continues_on_the_cpu(texts, tiny_config, tmp_path):
    """Dropout draws from the GPU's generator: the checkpoint keeps its state. Two uninterrupted runs agree bit for bit
    (the step is deterministic on this GPU), and a run stopped after step 2 and resumed on the GPU ends where they do.
    The same checkpoint resumes on the CPU (Adam's state and the weights moved there); that run cannot be bit-exact
    (other kernels, another generator), it trains on."""
    config = dict(dropout=0.1, checkpoint_every=1)  # no validation
    for name in ("straight", "again"):
        train(tiny_config(texts[0], **config, max_steps=4), tmp_path / name, progress=False, device="cuda")
    train(tiny_config(texts[0], **config, max_steps=2), tmp_path / "split", progress=False, device="cuda")
    checkpoint = load_checkpoint(tmp_path / "split" / "checkpoint.safetensors")
    assert len(checkpoint.info["state"]["cuda_rng_state"]) > 0
    import shutil

    shutil.copytree(tmp_path / "split", tmp_path / "to-cpu")
    resumed = Trainer(tiny_config(texts[0], **config, max_steps=4), tmp_path / "split", resume=True, device="cuda")
    assert resumed.state["step"] == 2 and "cuda_rng_state" not in resumed.state
    resumed.progress = False
    resumed.run()
    straight, again, split = (_state(tmp_path / name) for name in ("straight", "again", "split"))
    for name in straight:
        assert torch.equal(straight[name], again[name]), f"{name}: two runs on this GPU differ"
        assert torch.equal(straight[name], split[name]), f"{name}: the resumed run differs"
    on_cpu = Trainer(tiny_config(texts[0], **config, max_steps=4), tmp_path / "to-cpu", resume=True, device="cpu")
    assert next(on_cpu.model.parameters()).device.type == "cpu"
    moved = [v for state in on_cpu.optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    assert moved and all(v.device.type == "cpu" for v in moved)
    on_cpu.progress = False
    on_cpu.run()
    assert on_cpu.state["step"] == 4
    assert "cuda_rng_state" not in load_checkpoint(tmp_path / "to-cpu" / "checkpoint.safetensors").info["state"]


@GPU
def test_bfloat16_training_on_a_gpu_with_native_bfloat16(texts, tiny_config, tmp_path):
    """auto takes bfloat16 on an Ampere or later GPU (CUDA autocast). Two steps from the same start: the training and
    validation perplexities within 1% of float32's (bfloat16 rounds each operand by at most 2^-9; every log-softmax
    and the loss stay float32), and the exported weights are float32."""
    if torch.cuda.get_device_capability(0)[0] < 8:
        pytest.skip("this GPU has no native bfloat16")
    metrics = train(
        tiny_config(*texts, max_steps=2, precision="auto"), tmp_path / "bf16", progress=False, device="cuda"
    )
    reference = train(tiny_config(*texts, max_steps=2), tmp_path / "fp32", progress=False, device="cuda")
    assert metrics["precision"] == "bfloat16" and reference["precision"] == "float32"
    for key in ("train_ppl_forward", "valid_ppl_forward", "valid_ppl_backward"):
        assert metrics["best"][key] == pytest.approx(reference["best"][key], rel=1e-2), key
    import h5py
    import numpy as np

    with h5py.File(tmp_path / "bf16" / "weights.hdf5", "r") as handle:
        dtypes = []
        handle.visititems(lambda name, obj: dtypes.append(obj.dtype) if isinstance(obj, h5py.Dataset) else None)
    assert dtypes and all(d == np.float32 for d in dtypes)


@GPU
def test_the_fused_adam_runs_on_the_gpu():
    from spacy_elmo.train.run.trainer import adam

    params = [torch.nn.Parameter(torch.ones(3, device="cuda"))]
    optimizer = adam(params, 0.1)
    assert optimizer.defaults["fused"] is True
    params[0].grad = torch.full((3,), 2.0, device="cuda")
    optimizer.step()
    # the first Adam step moves each weight by lr (m / sqrt(v) = 1 after bias correction, eps aside)
    torch.testing.assert_close(params[0].detach().cpu(), torch.full((3,), 0.9), rtol=0, atol=1e-6)


@GPU
def test_more_processes_than_gpus_are_refused_in_one_line(tmp_path):
    count = torch.cuda.device_count()
    args = ["train", str(tmp_path / "m"), "--train", str(tmp_path), "--processes", str(count + 1), "--device", "cuda"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {count + 1} training processes on this machine need a GPU each, and torch sees {count}: start at "
        f"most {count}"
    ]


@GPU
def test_a_rank_on_a_gpu_talks_nccl_on_its_own_gpu(texts, tiny_config, tmp_path):
    """An nccl group of one process, seen by the trainer as rank 0 of 2: every collective (the step's loss sums, the
    time limit's maximum, the digest check, the barrier) runs over nccl with tensors on the rank's GPU, and
    DistributedDataParallel wraps the model already there. (Two ranks need two GPUs: the next test.)"""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from spacy_elmo.train.distributed import _bound_to

    gpu = torch.device("cuda", 0)
    dist.init_process_group("nccl", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1, **_bound_to(gpu))
    try:
        world = World(0, 2, 0, 1, "nccl", gpu)
        total = world.total(torch.tensor([1.5, 2.0], device=gpu))
        assert total.device == gpu and total.dtype == torch.float64 and total.tolist() == [1.5, 2.0]
        assert world.sum([3.0]) == [3.0] and world.max(4.0) == 4.0
        world.barrier()
        trainer = Trainer(tiny_config(texts[0], max_steps=2, max_minutes=5), tmp_path / "m", world=world)
        trainer.progress = False
        assert isinstance(trainer.network, DistributedDataParallel)
        assert trainer.device == gpu and next(trainer.network.parameters()).device == gpu
        metrics = trainer.run()
        assert metrics["steps"] == 2 and metrics["processes"] == 2
    finally:
        dist.destroy_process_group()


@GPU
@pytest.mark.distributed
def test_two_processes_on_two_gpus_train_the_one_gpu_model(texts, tiny_config, tmp_path):
    """`--processes 2 --device cuda`: nccl, process k on cuda:k; the weights agree with one GPU's run to float32
    rounding after 4 steps (as on CPUs with gloo, tests/train/test_distributed.py)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    import subprocess
    import sys

    args = ["--arch", "tiny", "--min-count", "2", "--token-budget", "256", "--max-length", "40", "--lr", "5e-3"]
    args += ["--warmup-steps", "2", "--seed", "3", "--max-steps", "4", "--precision", "float32", "--no-progress"]
    command = [sys.executable, "-m", "spacy_elmo", "train", str(tmp_path / "two"), "--train", str(texts[0])]
    result = subprocess.run(
        [*command, *args, "--processes", "2", "--device", "cuda"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "world size 2 (nccl)" in result.stdout
    config = tiny_config(texts[0], token_budget=256, max_steps=4)
    train(config, tmp_path / "one", progress=False, device="cuda")
    two, one = _state(tmp_path / "two"), _state(tmp_path / "one")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-4, msg=name)
