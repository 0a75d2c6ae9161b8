"""`spacy-elmo embed`: a text file to HDF5 in the layout of AllenNLP's `allennlp elmo` command."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.output import embed_file as embed_file_module
from spacy_elmo.output.embed_file import embed_file
from spacy_elmo.runtime.embedding.backend import ElmoBackend
from tests.numerics import assert_recomputed_close


def run_cli(fixture_dir, *args, **kwargs):
    """`spacy-elmo embed ARGS` on the fixture model, without the progress bar."""
    return CliRunner().invoke(app, ["embed", *map(str, args), "--model", str(fixture_dir), "--no-progress"], **kwargs)


def run_cli_apart(fixture_dir, *args, **kwargs):
    """:func:`run_cli` with stdout and stderr apart: click 8.2+ keeps them apart anyway, click 8.1 (the newest on
    Python 3.9) when asked (``mix_stderr=False``, a parameter 8.2 no longer has)."""
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:
        runner = CliRunner()
    return runner.invoke(app, ["embed", *map(str, args), "--model", str(fixture_dir), "--no-progress"], **kwargs)


def assert_same_vectors(a, b):
    """Two embed outputs hold the same datasets and map, to a few ulps (another process may sum in another order)."""
    with h5py.File(a, "r") as f, h5py.File(b, "r") as g:
        assert sorted(f) == sorted(g)
        for key in f:
            if key == "sentence_to_index":
                assert json.loads(f[key][0]) == json.loads(g[key][0])
            else:
                assert_recomputed_close(f[key][()], g[key][()])


def partial_files(folder):
    """Names of the ``.NAME.PID.partial`` files in ``folder``."""
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


def no_embedding(*args, **kwargs):
    raise AssertionError("embedded although the run was bound to fail")


@pytest.fixture()
def text_file(tmp_path, fixture_sentences):
    lines = [" ".join(s) for s in fixture_sentences[:7]]
    lines.insert(3, "")  # a blank line keeps its number and gets an empty array
    path = tmp_path / "sentences.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


@pytest.mark.parametrize("output_format", ["all", "top", "average"])
def test_datasets_per_line_equal_the_backend(backend, text_file, tmp_path, output_format):
    path, lines = text_file
    out = tmp_path / "vectors.hdf5"
    summary = embed_file(backend, path, out, output_format=output_format, batch_size=3)
    assert summary["sentences"] == len(lines) and summary["tokens"] == sum(len(line.split()) for line in lines)
    expected = backend.embed([line.split() for line in lines])
    with h5py.File(out, "r") as f:
        assert sorted(k for k in f if k != "sentence_to_index") == sorted(str(i) for i in range(len(lines)))
        for i, layers in enumerate(expected):
            want = {"all": layers, "top": layers[-1], "average": layers.mean(axis=0)}[output_format]
            got = f[str(i)][()]
            assert got.dtype == np.float32 and got.shape == want.shape
            assert_recomputed_close(got, want)
        assert f["3"].shape == ((backend.n_layers + 1, 0, backend.dim) if output_format == "all" else (0, backend.dim))
        index = json.loads(f["sentence_to_index"][0])
        assert index[lines[5]] == "5"
        assert f.attrs["model_fingerprint"] == backend.fingerprint and f.attrs["output_format"] == output_format
        assert f.attrs["n_output_layers"] == backend.n_layers + 1


def test_sentence_keys_and_duplicate_sentences(backend, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("the bank of the river\nI went to the bank\n", encoding="utf-8")
    out = tmp_path / "out.hdf5"
    embed_file(backend, path, out, output_format="top", use_sentence_keys=True)
    with h5py.File(out, "r") as f:
        assert set(f) == {"the bank of the river", "I went to the bank"}
        assert_recomputed_close(f["I went to the bank"][()], backend.embed([["I", "went", "to", "the", "bank"]])[0][-1])
    before = out.read_bytes()
    path.write_text("a b\nc d\na b\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"lines 1 and 3 hold the same sentence"):
        embed_file(backend, path, out, use_sentence_keys=True)
    assert out.read_bytes() == before  # a failed run leaves the old output alone
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_bad_input_names_file_and_line(backend, tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"fine line\ncaf\xe9 au lait\n")
    with pytest.raises(ValueError, match=r"latin1.txt, line 2: not valid UTF-8"):
        embed_file(backend, bad, tmp_path / "out.hdf5")
    assert not (tmp_path / "out.hdf5").exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        embed_file(backend, tmp_path / "missing.txt", tmp_path / "out.hdf5")
    with pytest.raises(ValueError, match="output_format must be one of"):
        embed_file(backend, bad, tmp_path / "out.hdf5", output_format="mean")


def test_command_line(fixture_dir, text_file, tmp_path):
    path, lines = text_file
    out = tmp_path / "cli.hdf5"
    runner = CliRunner()
    result = runner.invoke(
        app, ["embed", str(path), str(out), "--model", str(fixture_dir), "--average", "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert f"{len(lines)} sentences" in result.output
    with h5py.File(out, "r") as f:
        assert f["0"].ndim == 2
    result = runner.invoke(app, ["embed", str(path), str(out), "--model", str(fixture_dir), "--top", "--average"])
    assert result.exit_code == 2 and "choose one of --all, --top and --average" in result.output
    result = runner.invoke(app, ["embed", str(tmp_path / "nope.txt"), str(out), "--model", str(fixture_dir)])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_misspelled_tokenizer_is_named_with_the_valid_one_before_the_model_loads(text_file, tmp_path):
    path, _ = text_file
    out = tmp_path / "out.hdf5"
    missing_model = tmp_path / "no-model"  # not loaded: the tokenizer is checked first
    result = CliRunner().invoke(
        app, ["embed", str(path), str(out), "--model", str(missing_model), "--tokenizer", "whitspace"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: tokenizer='whitspace': not a spaCy language code, 'whitespace' or 'spacy'; did you mean 'whitespace'?"
    )
    assert not out.exists()


@pytest.mark.parametrize("case", ["directory", "parent is a file", "missing parent", "unwritable parent"])
def test_unusable_output_fails_before_any_work(backend, fixture_dir, text_file, tmp_path, monkeypatch, case):
    path, _ = text_file
    a_file, a_dir, locked, missing = tmp_path / "a_file", tmp_path / "a_dir", tmp_path / "locked", tmp_path / "nope"
    a_file.write_text("x", encoding="utf-8")
    a_dir.mkdir()
    locked.mkdir(mode=0o500)
    if os.geteuid() == 0:  # root may create files anywhere: let the mode bits bind it as they bind everyone else
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != locked and access(p, mode, **kw))
    output, error, message = {
        "directory": (a_dir, IsADirectoryError, "it is a directory"),
        "parent is a file": (a_file / "out.hdf5", NotADirectoryError, f"{a_file} is not a directory"),
        "missing parent": (missing / "out.hdf5", FileNotFoundError, f"the directory {missing} does not exist"),
        "unwritable parent": (locked / "out.hdf5", PermissionError, f"no permission to create files in {locked}"),
    }[case]
    message = f"cannot write {output}: {message}"
    monkeypatch.setattr(ElmoBackend, "embed", no_embedding)
    with pytest.raises(error) as raised:
        embed_file(backend, path, output)
    assert str(raised.value) == message
    result = run_cli(fixture_dir, path, output)
    assert result.exit_code == 2 and f"error: {message}" in result.output, result.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a_dir", "a_file", "locked", path.name]


def test_leading_byte_order_mark_is_dropped(backend, fixture_dir, tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes("\ufeffthe bank\nof the river\n".encode("utf-8"))  # as Notepad saves UTF-8
    expected = backend.embed([["the", "bank"]])[0][-1]
    api, cli = tmp_path / "api.hdf5", tmp_path / "cli.hdf5"
    embed_file(backend, path, api, output_format="top", use_sentence_keys=True)
    result = run_cli(fixture_dir, path, cli, "--top", "--use-sentence-keys")
    assert result.exit_code == 0, result.output
    for out in (api, cli):
        with h5py.File(out, "r") as f:
            assert sorted(f) == ["of the river", "the bank"]
            assert_recomputed_close(f["the bank"][()], expected)  # other batch-mates


def test_nul_in_a_sentence_key_is_an_error(backend, fixture_dir, tmp_path):
    path = tmp_path / "nul.txt"
    path.write_bytes(b"the bank\nthe\x00 bank\n")  # HDF5 would cut the second key short, to "the"
    out = tmp_path / "out.hdf5"
    message = f"{path}, line 2: 'the\\x00 bank' cannot be an HDF5 dataset name"
    with pytest.raises(ValueError) as raised:
        embed_file(backend, path, out, use_sentence_keys=True)
    assert str(raised.value).startswith(message)
    result = run_cli(fixture_dir, path, out, "--use-sentence-keys")
    assert result.exit_code == 2 and message in result.output, result.output
    assert not out.exists()
    assert run_cli(fixture_dir, path, out).exit_code == 0  # keyed by line number, the NUL is just a character
    with h5py.File(out, "r") as f:
        assert f["1"].shape == (backend.n_layers + 1, 2, backend.dim)
        assert json.loads(f["sentence_to_index"][0])["the\x00 bank"] == "1"


def test_standard_input(backend, fixture_dir, text_file, tmp_path, monkeypatch):
    path, lines = text_file
    reference, api, cli = tmp_path / "file.hdf5", tmp_path / "api.hdf5", tmp_path / "cli.hdf5"
    embed_file(backend, path, reference)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert embed_file(backend, "-", api, progress=True)["sentences"] == len(lines)  # counted, rewound, read
    result = run_cli(fixture_dir, "-", cli, input=path.read_bytes())
    assert result.exit_code == 0 and f"{len(lines)} sentences" in result.output, result.output
    assert_same_vectors(api, reference)
    assert_same_vectors(cli, reference)
    result = run_cli(fixture_dir, "-", cli, input=b"fine\ncaf\xe9\n")
    assert result.exit_code == 2 and "error: <stdin>, line 2: not valid UTF-8" in result.output, result.output


def test_an_empty_input_is_said_on_stderr_and_still_written(fixture_dir, tmp_path):
    """An empty file gave an empty HDF5 and exit 0 without a word: now one warning line names it (docs/cli.md)."""
    empty, out = tmp_path / "empty.txt", tmp_path / "out.hdf5"
    empty.write_bytes(b"")
    for source, stdin, shown in ((empty, None, empty), ("-", b"", "<stdin>")):
        result = run_cli_apart(fixture_dir, source, out, input=stdin)
        assert result.exit_code == 0, result.output
        assert result.stderr == f"warning: {shown} is empty: {out} holds no sentence\n", result.stderr
        assert "wrote" in result.stdout and "0 sentences" in result.stdout
        with h5py.File(out, "r") as f:
            assert list(f) == ["sentence_to_index"] and json.loads(f["sentence_to_index"][0]) == {}
    (tmp_path / "blank.txt").write_text("\n", encoding="utf-8")  # a blank line is a sentence (an empty array)
    result = run_cli_apart(fixture_dir, tmp_path / "blank.txt", out)
    assert result.exit_code == 0 and result.stderr == "" and "1 sentences" in result.stdout, result.output


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_an_endless_line_is_one_line_of_error(fixture_dir, tmp_path):
    """`embed /dev/zero` read one endless line until a MemoryError (a 66-line traceback)."""
    out = tmp_path / "out.hdf5"
    for progress in ("--progress", "--no-progress"):  # the bar counts the lines first: bounded too
        result = CliRunner().invoke(
            app, ["embed", "/dev/zero", str(out), "--model", str(fixture_dir), progress], catch_exceptions=False
        )
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"error: /dev/zero, line 1: longer than {embed_file_module.MAX_LINE_BYTES:,} bytes, the most a line may "
            "hold (one sentence per line is expected)"
        ]
        assert list(tmp_path.iterdir()) == []


def test_the_line_bound_counts_the_text_not_the_line_break(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(embed_file_module, "MAX_LINE_BYTES", 12)
    path, out = tmp_path / "in.txt", tmp_path / "out.hdf5"
    path.write_bytes(b"the bank \xc3\xa9\r\nof the river\n")  # 12 bytes of text each, then \r\n or \n
    assert embed_file(backend, path, out, progress=True)["sentences"] == 2
    path.write_bytes(b"the bank\nof the rivers\n")
    with pytest.raises(ValueError, match=r"in\.txt, line 2: longer than 12 bytes"):
        embed_file(backend, path, out)


@pytest.mark.skipif(not Path("/dev/stdin").exists(), reason="no /dev/stdin here")
def test_dev_stdin_pipe_with_progress_bar(backend, fixture_dir, text_file, tmp_path):
    path, lines = text_file
    reference, out = tmp_path / "file.hdf5", tmp_path / "pipe.hdf5"
    embed_file(backend, path, reference)
    command = [sys.executable, "-m", "spacy_elmo", "embed", "/dev/stdin", str(out), "--model", str(fixture_dir)]
    done = subprocess.run(command, input=path.read_bytes(), capture_output=True, timeout=60)  # a pipe: read only once
    assert done.returncode == 0 and f"{len(lines)} sentences".encode() in done.stdout, done.stderr
    assert_same_vectors(out, reference)


def test_output_that_is_the_input_is_refused(backend, fixture_dir, text_file, tmp_path, monkeypatch):
    path, _ = text_file
    before = path.read_bytes()
    hard_link = tmp_path / "hard_link.txt"
    os.link(path, hard_link)
    message = f"the output file {path} is the input file"
    result = run_cli(fixture_dir, hard_link, path)
    assert result.exit_code == 2 and message in result.output, result.output
    for source in (path, hard_link):
        with pytest.raises(ValueError, match=message):
            embed_file(backend, source, path)
    with open(path, encoding="utf-8") as stdin:  # embed - OUT < OUT
        monkeypatch.setattr(sys, "stdin", stdin)
        with pytest.raises(ValueError, match=message):
            embed_file(backend, "-", path)
    assert path.read_bytes() == before


def test_stale_partial_files_of_dead_runs_are_removed(backend, fixture_dir, text_file, tmp_path):
    path, _ = text_file
    finished = subprocess.Popen([sys.executable, "-c", ""])
    finished.wait()  # its PID is now free: a run killed by SIGKILL leaves such a one behind
    dead, alive = finished.pid, os.getppid()
    for via, out in (("api", tmp_path / "api.hdf5"), ("cli", tmp_path / "cli.hdf5")):
        kept = [f".{out.name}.{alive}.partial", f".other.hdf5.{dead}.partial", f".{out.name}.x{dead}.partial"]
        for name in [*kept, f".{out.name}.{dead}.partial"]:
            (tmp_path / name).write_bytes(b"")
        if via == "api":
            embed_file(backend, path, out)
        else:
            assert run_cli(fixture_dir, path, out).exit_code == 0
        assert partial_files(tmp_path) == sorted(kept) and out.exists()
        for name in kept:
            (tmp_path / name).unlink()


def test_an_output_folder_that_cannot_be_listed_is_no_error(backend, text_file, tmp_path, monkeypatch):
    path, _ = text_file
    iterdir = Path.iterdir

    def unlistable(folder):  # as for a folder of mode -wx; faked, since root may list any folder
        if folder == tmp_path:
            raise PermissionError(13, "Permission denied", str(folder))
        return iterdir(folder)

    monkeypatch.setattr(Path, "iterdir", unlistable)
    embed_file(backend, path, tmp_path / "out.hdf5")
    assert (tmp_path / "out.hdf5").exists()


def test_sigterm_handler_only_while_writing_and_only_in_the_main_thread(backend, text_file, tmp_path, monkeypatch):
    path, _ = text_file
    seen = []
    embed = ElmoBackend.embed

    def spying(self, *args, **kwargs):
        seen.append(signal.getsignal(signal.SIGTERM))
        return embed(self, *args, **kwargs)

    monkeypatch.setattr(ElmoBackend, "embed", spying)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    embed_file(backend, path, tmp_path / "main.hdf5")
    assert callable(seen[-1]) and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    worker = threading.Thread(target=embed_file, args=(backend, path, tmp_path / "thread.hdf5"))
    worker.start()
    worker.join()
    assert seen[-1] == signal.SIG_DFL and (tmp_path / "thread.hdf5").exists()  # Python allows no handler there

    def own(signum, frame):
        pass

    signal.signal(signal.SIGTERM, own)
    try:
        embed_file(backend, path, tmp_path / "own.hdf5")
        assert seen[-1] is own and signal.getsignal(signal.SIGTERM) is own  # the program's handler is left alone
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_keyboard_interrupt_removes_the_partial_file(backend, text_file, tmp_path, monkeypatch):
    path, _ = text_file
    out = tmp_path / "out.hdf5"

    def interrupted(self, *args, **kwargs):
        assert partial_files(tmp_path) == [f".out.hdf5.{os.getpid()}.partial"]
        raise KeyboardInterrupt

    monkeypatch.setattr(ElmoBackend, "embed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        embed_file(backend, path, out)
    assert partial_files(tmp_path) == [] and not out.exists()


EMBED_STDIN_API = (
    "import sys; from spacy_elmo import load_bilm; from spacy_elmo.output.embed_file import embed_file; "
    "embed_file(load_bilm(sys.argv[1]), '-', sys.argv[2])"
)


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.parametrize(
    "via, signum",
    [("cli", signal.SIGTERM), ("cli", signal.SIGINT), ("api", signal.SIGTERM)],
    ids=["cli-TERM", "cli-INT", "api-TERM"],
)
def test_a_signal_mid_run_leaves_no_partial_file(fixture_dir, tmp_path, via, signum):
    result = _signal_mid_run(fixture_dir, tmp_path, via, signum)
    if result is None:
        pytest.fail(
            "the run did not end within 60 s of the signal; its stacks:\n" + (tmp_path / "stderr.txt").read_text()
        )
    returncode, stderr, folder = result
    assert partial_files(folder) == [] and not (folder / "out.hdf5").exists(), stderr
    if signum == signal.SIGTERM:
        assert returncode == -signal.SIGTERM, stderr  # ended by the signal, as without the handler
    else:
        assert returncode > 0, stderr  # an exit, as for Ctrl-C (typer's status 130, click's 1)


def _signal_mid_run(fixture_dir, folder, via, signum):
    """(return code, stderr, folder) of a run signalled while it writes, or None if it did not end (stacks in
    stderr)."""
    folder.mkdir(exist_ok=True)
    out, log = folder / "out.hdf5", folder / "stderr.txt"
    command = {
        "cli": [
            sys.executable,
            "-X",
            "faulthandler",
            "-m",
            "spacy_elmo",
            "embed",
            "-",
            str(out),
            "--model",
            str(fixture_dir),
            "--no-progress",
        ],
        "api": [sys.executable, "-X", "faulthandler", "-c", EMBED_STDIN_API, str(fixture_dir), str(out)],
    }[via]
    with open(log, "wb") as stderr:
        # SIGINT's default action, even when this test runs as a background job (which ignores SIGINT, and
        # an ignored signal stays ignored across exec, so Python would not turn it into KeyboardInterrupt)
        run = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        run.stdin.write(b"the bank of the river\n" * 10)  # less than a chunk, and stdin stays open: the run waits
        run.stdin.flush()
        deadline = time.monotonic() + 60
        while not partial_files(folder) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert partial_files(folder) == [f".out.hdf5.{run.pid}.partial"], log.read_text()
        run.send_signal(signum)
        if signum == signal.SIGINT:
            # Python drops a KeyboardInterrupt raised while a weakref callback or __del__ runs (about 1 run in
            # 40 here): the run then goes on reading. At the end of its input it must still not publish.
            run.stdin.close()
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack to stderr
            run.wait(timeout=30)
            return None
    finally:
        run.kill()
        run.stdin.close()
    return run.returncode, log.read_text(), folder


@pytest.mark.skipif(os.name == "nt", reason="POSIX signals")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped interrupt, reported
def test_a_ctrl_c_that_python_drops_still_keeps_the_output_from_appearing(tmp_path):
    # A KeyboardInterrupt raised while a __del__ (or weakref callback) runs is printed and dropped by
    # Python, and the interrupted code goes on: the file must still be removed and never published.
    from spacy_elmo.output.embed_file import _written_atomically

    class DeletedWithCtrlC:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)  # the handler runs inside __del__: its exception is dropped

    out = tmp_path / "out.hdf5"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a program run from a terminal
    went_on = False
    try:
        with pytest.raises(KeyboardInterrupt), _written_atomically(out) as temporary:
            temporary.write_bytes(b"half a file")
            DeletedWithCtrlC()
            went_on = True
    finally:
        signal.signal(signal.SIGINT, previous)
    assert went_on  # the interrupt was dropped where it was raised ...
    assert partial_files(tmp_path) == [] and not out.exists()  # ... and still nothing was published


_DISK_FULL = """
import resource, signal, sys
# a write past the limit fails with EFBIG, as one on a full disk with ENOSPC
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from spacy_elmo.cli import app
app(sys.argv[2:])
"""


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs POSIX file-size limits")
def test_a_full_disk_stops_embed_at_the_first_failed_write(fixture_dir, tmp_path):
    """HDF5 swallowed write errors ("Exception ignored in ObjectID.__dealloc__") and the process died with SIGSEGV."""
    words = ["the", "bank", "river", "money", "a", "of", "went"]
    text = tmp_path / "in.txt"
    text.write_text("\n".join(" ".join(words[(i * 7 + j) % 7] for j in range(30)) for i in range(400)) + "\n")
    out = tmp_path / "out" / "vectors.hdf5"
    out.parent.mkdir()
    args = ["embed", str(text), str(out), "--model", str(fixture_dir), "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-c", _DISK_FULL, str(200_000), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])  # about 30 of 400 lines fit under 200 kB
    lines = done.stderr.strip().splitlines()
    assert lines == [f"error: cannot write {out}: file too large (errno EFBIG)"], done.stderr[-2000:]
    assert list(out.parent.iterdir()) == []  # neither the output nor a partial file is left
