"""One run per output folder: claims nest within a thread, another thread or process is refused, and a claim leaves
the folder as it found it (training's own runs: tests/train/test_train_safety.py)."""

import os
import subprocess
import sys
import threading

import pytest

from spacy_elmo.train.output_folder.folder_lock import (
    LOCK_NAME,
    FolderInUseError,
    claim_folder,
    folder_claimed,
    remove_stale_temporaries,
)


def test_claims_nest_within_a_thread_and_refuse_other_threads(tmp_path):
    out = tmp_path / "new" / "out"
    refused = []

    def other_thread():
        try:
            claim_folder(out)
        except FolderInUseError as err:
            refused.append(str(err))

    with folder_claimed(out):
        assert (out / LOCK_NAME).is_file()
        with folder_claimed(out):  # an adaptation's training run, inside the adaptation
            thread = threading.Thread(target=other_thread)
            thread.start()
            thread.join()
        assert (out / LOCK_NAME).is_file()  # still held by the outer claim
    assert refused == [f"{out.resolve()} is in use by another run in this process: write into another folder"]
    assert not out.exists() and (tmp_path / "new").is_dir()  # the folder the claim made, left empty: gone again


def test_a_claim_leaves_a_folder_as_it_found_it_and_another_process_is_refused(tmp_path):
    (tmp_path / "kept.txt").write_text("x")
    claim = claim_folder(tmp_path)
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from spacy_elmo.train.output_folder.folder_lock import claim_folder\n"
            "claim_folder(sys.argv[1])",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert holder.returncode == 1
    assert (
        holder.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"FolderInUseError: {tmp_path.resolve()} is in use by another spacy-elmo run (it holds {LOCK_NAME} there): "
            "wait for it to end, or write into another folder"
        )
    )
    claim.release()
    claim.release()  # once only
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt"]
    with pytest.raises(NotADirectoryError, match=r"kept\.txt is a file, not a folder"):
        claim_folder(tmp_path / "kept.txt")


def test_only_temporaries_of_ended_processes_and_of_this_one_are_removed(tmp_path):
    ended = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    names = {
        f".checkpoint.safetensors.{ended}.0123abcd.tmp": False,  # its process ended
        f".weights.hdf5.{os.getpid()}.0123abcd.tmp": False,  # this process (it writes none before its claim)
        f".metrics.json.{os.getppid()}.0123abcd.tmp": True,  # a running process's
        f"checkpoint.safetensors.{ended}.0123abcd.tmp": True,  # not hidden: not a temporary's name
        f".notes.{ended}.tmp": True,  # no random part
    }
    for name in names:
        (tmp_path / name).write_text("x")
    removed = remove_stale_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == sorted(name for name, kept in names.items() if not kept)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(name for name, kept in names.items() if kept)
