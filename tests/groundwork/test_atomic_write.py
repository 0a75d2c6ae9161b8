"""groundwork/atomic_write.py: a file written through atomic_path is the old one or the new one, never half of one."""

import json
import threading
from pathlib import Path

import pytest

from spacy_elmo.groundwork.atomic_write import atomic_path, write_json_atomically, write_text_atomically


def test_an_error_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError, match="disk full"), atomic_path(target) as tmp:
        tmp.write_text("half of the ne", encoding="utf-8")
        assert tmp.parent == target.parent and tmp != target
        raise RuntimeError("disk full")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_success_replaces_the_target_in_one_step(tmp_path):
    target = tmp_path / "m.json"
    write_json_atomically(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1} and target.read_text().endswith("\n")
    write_text_atomically(target, "second")
    assert target.read_text() == "second" and [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_a_folder_written_through_it_replaces_nothing_on_error(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as tmp:
        tmp.mkdir()
        (tmp / "weights.hdf5").write_bytes(b"x")
        raise KeyboardInterrupt
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_concurrent_writers_of_one_file_never_share_a_temporary(tmp_path):
    target = tmp_path / "shared.txt"
    texts = [f"writer {i} " * 2000 for i in range(8)]
    threads = [threading.Thread(target=write_text_atomically, args=(target, text)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_text() in texts  # one writer's whole text, not a mix
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_a_full_disk_names_the_file_being_written_not_its_temporary(tmp_path, monkeypatch):
    import errno

    from spacy_elmo.groundwork.atomic_write import WriteFailedError, atomic_path, atomic_paths, reported_as

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target, other = tmp_path / "weights.hdf5", tmp_path / "options.json"
    target.write_text("old weights")
    other.write_text("old options")
    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(WriteFailedError) as err, atomic_paths(target, other) as (weights, options):
        options.write_text("new options")
        with reported_as(target), atomic_path(weights) as inner:  # a writer that writes atomically itself
            inner.write_bytes(b"new weights")
    assert str(err.value) == f"cannot write {target}: no space left on device (errno ENOSPC)"
    assert target.read_text() == "old weights" and other.read_text() == "old options"  # neither replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["options.json", "weights.hdf5"]
