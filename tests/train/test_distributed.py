"""Training on 2 processes (torchrun's, or those `train --processes 2` starts): they train the single-process model,
only rank 0 writes, --resume works."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from spacy_elmo.train import Trainer
from spacy_elmo.train.distributed import (
    SINGLE,
    World,
    _wait_until_released,
    launched_world,
    training_processes,
)
from spacy_elmo.train.output_folder.storage import load_checkpoint
from tests.conftest import torch_threads
from tests.train.conftest import wikitext_lines

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # each test starts torchrun processes

if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("this torch build has no torch.distributed with the gloo backend", allow_module_level=True)

EXPECTED_FILES = {
    "options.json",
    "weights.hdf5",
    "vocab.txt",
    "softmax.safetensors",
    "metrics.json",
    "checkpoint.safetensors",
    "README.md",
}
# the tiny preset on 300 WikiText-2 lines; global batches of <= 80 padded tokens: the first 8 have 4, 4, 5, 6, 1, 4,
# 2 and 3 rows, so the ranks' shares are sometimes uneven and once (step 5) rank 1 has no row of its own
TRAIN_ARGS = (
    "--arch",
    "tiny",
    "--min-count",
    "2",
    "--token-budget",
    "80",
    "--max-length",
    "50",
    "--lr",
    "1e-2",
    "--warmup-steps",
    "5",
    "--seed",
    "7",
    "--epochs",
    "1",
    "--no-progress",
    "--precision",  # the exact path: bfloat16 products would agree with one process only to bfloat16 rounding
    "float32",
)


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    return wikitext_lines(data_dir, tmp_path_factory.mktemp("texts"), train=300, valid=100)


def spawning(cwd: Path, out: Path, texts, *args: str) -> subprocess.CompletedProcess:
    """``python -m spacy_elmo train OUT ... --processes 2``: the command starts its 2 processes itself."""
    train_file, valid_file = texts
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    command = [sys.executable, "-m", "spacy_elmo", "train", str(out), "--train", str(train_file)]
    command += ["--valid", str(valid_file), *TRAIN_ARGS, "--processes", "2", *args]
    cwd.mkdir(exist_ok=True)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def torchrun(cwd: Path, out: Path, texts, *args: str) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node 2 -m spacy_elmo train OUT ...`` (a free port is chosen), one thread per
    rank."""
    train_file, valid_file = texts
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "spacy_elmo",
        "train",
        str(out),
        "--train",
        str(train_file),
        "--valid",
        str(valid_file),
        *TRAIN_ARGS,
        *args,
    ]
    cwd.mkdir(exist_ok=True)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def single(texts, tiny_config, tmp_path_factory):
    """The single-process run to compare with: 8 steps, one thread (what each rank has), TRAIN_ARGS' options."""
    out = tmp_path_factory.mktemp("single")
    options = dict(min_count=2, token_budget=80, max_length=50, warmup_steps=5, seed=7, precision="float32")
    config = tiny_config(*texts, **options, max_steps=8)
    with torch_threads(1):
        metrics = Trainer(config, out, progress=False).run()
    return out, metrics


@pytest.fixture(scope="module")
def half(texts, tmp_path_factory):
    """2 processes, stopped after 4 of the 8 steps."""
    root = tmp_path_factory.mktemp("ddp")
    result = torchrun(root / "cwd", root / "out", texts, "--max-steps", "4", "--checkpoint-every", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    return root, result


@pytest.fixture(scope="module")
def resumed(texts, half):
    """The same directory resumed by 2 processes up to step 8."""
    root, _ = half
    result = torchrun(root / "cwd", root / "out", texts, "--resume", "--max-steps", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    return root, result


def test_rank_0_reports_the_world_and_alone_writes_files(half):
    root, result = half
    assert "world size 2 (gloo): rank 0 of 2 writes the files" in result.stdout, result.stdout
    assert result.stdout.count("saved to") == 1, result.stdout  # rank 1 prints nothing
    assert "Traceback" not in result.stderr and "error" not in result.stderr.lower(), result.stderr
    assert {p.name for p in (root / "out").iterdir()} == EXPECTED_FILES
    assert not list((root / "cwd").iterdir())  # no rank left a file in its working directory
    metrics = json.loads((root / "out" / "metrics.json").read_text())
    assert metrics["processes"] == 2 and metrics["steps"] == 4


def test_two_processes_train_the_single_process_model_and_resume(single, resumed):
    """The same global batches and steps: the weights agree with one process to float rounding (7e-6 after 8 steps
    with 2048-token batches), and so does perplexity.

    The ranks' own weights are compared by the run itself (it fails when their digests differ).
    """
    single_dir, single_metrics = single
    root, result = resumed
    assert "Traceback" not in result.stderr, result.stderr
    ours = json.loads((root / "out" / "metrics.json").read_text())
    assert ours["steps"] == single_metrics["steps"] == 8 and ours["words_seen"] == single_metrics["words_seen"]
    mine, theirs = ours["best"]["valid_ppl_mean"], single_metrics["best"]["valid_ppl_mean"]
    assert abs(mine - theirs) <= 0.005 * theirs, (mine, theirs)
    distributed = load_checkpoint(root / "out" / "checkpoint.safetensors").model
    alone = load_checkpoint(single_dir / "checkpoint.safetensors").model
    assert distributed.keys() == alone.keys()
    for name in alone:
        torch.testing.assert_close(distributed[name], alone[name], rtol=0, atol=1e-4, msg=name)
    assert {p.name for p in (root / "out").iterdir()} == EXPECTED_FILES and not list((root / "cwd").iterdir())


def test_processes_2_trains_and_resumes_what_torchrun_does(texts, resumed, tmp_path):
    """`train --processes 2` is torchrun's training without torchrun: 4 steps, resumed to 8, give bit-identical weights;
    one line of output each."""
    torchrun_root, _ = resumed
    result = spawning(tmp_path / "cwd", tmp_path / "out", texts, "--max-steps", "4", "--checkpoint-every", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    result = spawning(tmp_path / "cwd", tmp_path / "out", texts, "--resume", "--max-steps", "8")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("training processes: 2") == 1, result.stdout
    assert result.stdout.count("world size 2 (gloo)") == 1 and result.stdout.count("saved to") == 1, result.stdout
    assert "Traceback" not in result.stderr and "error" not in result.stderr.lower(), result.stderr
    assert {p.name for p in (tmp_path / "out").iterdir()} == EXPECTED_FILES
    assert not list((tmp_path / "cwd").iterdir())
    ours = load_checkpoint(tmp_path / "out" / "checkpoint.safetensors").model
    theirs = load_checkpoint(torchrun_root / "out" / "checkpoint.safetensors").model
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["processes"] == 2


def test_an_error_in_the_processes_is_said_once_and_exits_2(texts, tmp_path):
    result = spawning(tmp_path / "cwd", tmp_path / "out", texts, "--resume")
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--resume" in errors[0] and "checkpoint" in errors[0], result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_divergence_under_processes_2_is_said_once_and_exits_2(texts, tmp_path):
    result = spawning(tmp_path / "cwd", tmp_path / "out", texts, "--lr", "1e30", "--max-steps", "4")
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: training diverged at step 2"), result.stderr


def test_processes_are_checked_and_torchrun_keeps_its_own(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert training_processes(1) == 1 and training_processes(3) == 3
    with pytest.raises(ValueError, match="at least 1, not 0"):
        training_processes(0)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert training_processes(4) == 1  # torchrun started the processes already


def test_divergence_stops_every_rank_at_the_same_step(texts, tmp_path):
    """No rank waits forever at an all-reduce: the all-reduced loss is inf on every rank, each exits with status 2."""
    result = torchrun(
        tmp_path / "cwd", tmp_path / "out", texts, "--lr", "1e30", "--checkpoint-every", "1", "--max-steps", "4"
    )
    assert result.returncode != 0  # torchrun's own status for a failed worker
    messages = [line for line in result.stderr.splitlines() if line.startswith("error: training diverged at step 2")]
    assert 1 <= len(messages) <= 2 and "exitcode  : 2" in result.stderr, result.stderr  # rank 1 may be stopped first
    # vocab.txt is written with the model (export_model); the checkpoint holds the vocabulary too
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"checkpoint.safetensors"}
    assert load_checkpoint(tmp_path / "out" / "checkpoint.safetensors").info["state"]["step"] == 1


def test_shares_of_a_batch_are_disjoint_and_cover_it():
    rows = [f"s{i}" for i in range(7)]
    shares = [World(rank, 3).share(rows) for rank in range(3)]
    assert sorted(row for share, weight in shares for row in share) == rows and all(w == 1.0 for _, w in shares)
    assert World(2, 3).share(["only"]) == (["only"], 0.0)  # no row of its own: joins the all-reduce, adds nothing
    assert SINGLE.share(rows) == (rows, 1.0) and SINGLE.sum([1.5, 2]) == [1.5, 2.0] and SINGLE.same(3)


def test_only_torchruns_variables_make_a_world(monkeypatch):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launched_world() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert launched_world() is None  # torchrun with one process: train as a single process
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert launched_world() == (1, 2, 1, 2)
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="RANK=2"):
        launched_world()


def _on_gloo(rank: int, port: int, values, rounds: int, results) -> None:
    """One of 2 ranks on a real gloo group: World.same/sum answers, then ``rounds`` of World.sum and World.max, counting
    those that returned while gloo still held the tensor."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    world = World(rank, 2, rank, 2, "gloo")
    answers = (world.same(values[rank]), world.same(5), world.sum([rank, 1.0]))
    handed = []
    all_reduce = torch.distributed.all_reduce

    def recording(tensor, *args, **kwargs):
        handed.append(tensor)
        return all_reduce(tensor, *args, **kwargs)

    torch.distributed.all_reduce = recording
    held = 0
    for step in range(rounds):
        world.sum([step, 1.0])
        world.max(step)
        held += sum(tensor._use_count() > 1 for tensor in handed)
        handed.clear()
    results.put((rank, answers, held))
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def on_gloo():
    """What :func:`_on_gloo` reports on 2 spawned ranks, by rank."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    values = [2**48 - 1, 2**48 - 2]
    processes = [context.Process(target=_on_gloo, args=(rank, port, values, 150, results)) for rank in range(2)]
    for process in processes:
        process.start()
    answers = sorted(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=60)
    return answers


def test_ranks_with_different_weights_are_told_apart(on_gloo):
    """The end-of-run check (World.same on the weights' digests) sees a difference on any rank."""
    assert [(rank, answers) for rank, answers, _ in on_gloo] == [
        (0, (False, True, [1.0, 2.0])),
        (1, (False, True, [1.0, 2.0])),
    ]


def test_a_collective_returns_once_gloo_has_let_go_of_its_tensor(monkeypatch):
    """gloo's worker thread wakes the caller of a collective and only then drops its reference to the tensor, which
    takes the GIL: a rank that stops right after its last collective (a diverged loss) could be shutting Python down by
    then, and Python ends such a thread inside a C++ destructor, so the rank aborted ("terminate called without an
    active exception") instead of exiting with status 2. Here an autograd graph stands in for that late worker: it
    holds a C++ reference to the tensor for 50 ms after all_reduce has returned."""
    handed = []

    def all_reduce(tensor, op=None):
        late_worker = [torch.ones(1, requires_grad=True) * tensor]  # keeps a C++ reference to `tensor`
        assert tensor._use_count() > 1
        handed.append(tensor)
        threading.Timer(0.05, late_worker.clear).start()

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    world = World(0, 2, 0, 2, "gloo")
    assert world.sum([1.0, 2.0]) == [1.0, 2.0] and world.max(3.0) == 3.0
    assert [tensor._use_count() for tensor in handed] == [1, 1]  # only their Python objects hold them now


def test_gloo_has_let_go_of_every_tensor_when_a_collective_returns(on_gloo):
    """The same on a real gloo group (before the fix, 10-20% of all-reduces returned with the tensor still held on a
    loaded 2-core machine); this also checks what the wait relies on: once gloo has let go, the use count is 1."""
    assert [(rank, held) for rank, _, held in on_gloo] == [(0, 0), (1, 0)]


def test_waiting_for_a_tensor_that_stays_held_is_bounded():
    tensor = torch.ones(1)
    holder = torch.ones(1, requires_grad=True) * tensor  # never let go during the wait
    _wait_until_released(tensor, timeout_s=0.05)
    assert tensor._use_count() > 1 and holder.grad_fn is not None


@pytest.mark.parametrize("index", [0, 1])
def test_a_group_that_cannot_form_is_said_by_rank_0_alone(index, monkeypatch, capsys):
    """When rank 0 stops early (a --resume without a checkpoint, said by rank 0), another rank's joining fails too: it
    must not add a second error line (seen as two `error:` lines under load)."""
    from spacy_elmo.train import distributed

    def refused(*_, **__):
        raise RuntimeError("Gloo connectFullMesh failed: Connection closed by peer")

    monkeypatch.setattr(torch.distributed, "init_process_group", refused)
    with pytest.raises(SystemExit) as stopped:
        distributed._spawned(index, 2, "tcp://127.0.0.1:1", lambda world: None, ())
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert ("could not form a gloo group" in said) == (index == 0), said
