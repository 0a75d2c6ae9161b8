"""benchmarks/gpu_carry.py without a package index: one line, and the wheels an earlier run downloaded are kept."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gpu_carry(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_carry

    return gpu_carry


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def earlier_wheels(tmp_path):
    folder = tmp_path / ".whl"
    folder.mkdir()
    (folder / "srsly-earlier.whl").write_bytes(b"an earlier run's wheel")
    return folder


def test_an_unreachable_index_is_one_line_and_keeps_the_earlier_wheels(gpu_carry, earlier_wheels, monkeypatch):
    """pip's failure was a CalledProcessError traceback, after the earlier run's .whl/ had been deleted."""
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no configured index or local wheel folder
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{closed_port()}/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    with pytest.raises(SystemExit) as stopped:
        gpu_carry.download_wheels(earlier_wheels, "3.12")
    message = str(stopped.value.code)
    assert message.startswith("gpu_carry: pip download failed (is a package index reachable from here?): ")
    assert "\n" not in message and "Traceback" not in message, message
    assert [p.name for p in earlier_wheels.iterdir()] == ["srsly-earlier.whl"]
    assert [p.name for p in earlier_wheels.parent.iterdir()] == [".whl"]  # no partial download left beside it


def test_a_download_that_succeeds_replaces_the_earlier_wheels(gpu_carry, earlier_wheels, monkeypatch):
    def pip(command, *args):  # pip's download / wheel, writing one wheel where it is told to
        folder = Path(args[args.index("--dest" if command == "download" else "--wheel-dir") + 1])
        (folder / f"{command}.whl").write_bytes(b"a new wheel")

    monkeypatch.setattr(gpu_carry, "pip", pip)
    gpu_carry.download_wheels(earlier_wheels, f"{sys.version_info.major}.{sys.version_info.minor}")
    assert sorted(p.name for p in earlier_wheels.iterdir()) == ["download.whl", "wheel.whl"]
    assert [p.name for p in earlier_wheels.parent.iterdir()] == [".whl"]


@pytest.mark.parametrize("layout", ["clone", "worktree"])
def test_carried_paths_are_kept_out_of_git_status_in_a_clone_or_a_worktree(gpu_carry, tmp_path, layout):
    """In a worktree ``.git`` is a file: the carried paths still go to the repository's info/exclude."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    repo = tmp_path / "repo"
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "tracked.txt").write_text("x")
    subprocess.run([*git, "add", "tracked.txt"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=repo, check=True)
    root = repo
    if layout == "worktree":
        root = tmp_path / "wt"
        subprocess.run([*git, "worktree", "add", "-q", str(root)], cwd=repo, check=True)
    (root / ".venv-carry").mkdir()
    (root / ".venv-carry" / "f").write_text("y")
    gpu_carry.exclude_from_git([".venv-carry"], root=root)
    gpu_carry.exclude_from_git([".venv-carry"], root=root)  # once only
    status = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True)
    assert status.stdout == ""
    exclude = (repo / ".git" / "info" / "exclude").read_text()
    assert exclude.count("/.venv-carry") == 1
