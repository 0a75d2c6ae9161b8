"""spacy_elmo.sources.fetch on its own: a store that knows no file format and no command, on a loopback server."""

import hashlib
import io
import os
import shutil
import zipfile

import pytest

from spacy_elmo.bilm.weights import WeightFileError
from spacy_elmo.sources.download import DownloadError
from spacy_elmo.sources.fetch import FetchError, Store, is_archive, is_url
from tests.sources.test_download import LoopbackServer, ReadOnly

BODY = b"plain text, no model format at all\n" * 100


@pytest.fixture()
def server():
    srv = LoopbackServer({"data/notes.txt": BODY, "data/page.json": b"<html>an error page</html>"})
    yield srv
    srv.stop()


@pytest.fixture()
def read_only(monkeypatch):
    """``read_only.add(folder)``: writes under ``folder`` fail (EROFS) and are listed in ``read_only.attempts``."""
    return ReadOnly(monkeypatch)


def _no_html(path, name):
    """A caller's check: says what is wrong with a body (here: an HTML page), or None."""
    return "it is an HTML page" if path.read_bytes().startswith(b"<html") else None


def test_a_file_is_fetched_once_with_its_record_and_label(tmp_path, server):
    store = Store(tmp_path / "store")
    url = server.url("data/notes.txt")
    assert not store.is_fetched(url)
    path = store.fetch(url, label="my notes", sha256=hashlib.sha256(BODY).hexdigest())
    assert path == store.path_of(url) and path.read_bytes() == BODY and path.name == "notes.txt"
    assert store.fetch(url) == path and server.hits["data/notes.txt"] == 1  # the second call reads the store
    assert store.is_fetched(url)
    assert store.entry_of(path) == (path.parent, "my notes")
    assert store.entry_of(tmp_path / "elsewhere.txt") is None
    assert sorted(store.forget(url)) == sorted([path, path.with_name("notes.txt.json")])
    assert not path.exists() and not store.is_fetched(url)


def test_the_callers_check_refuses_a_body_and_nothing_is_stored(tmp_path, server):
    url = server.url("data/page.json")
    with pytest.raises(FetchError, match=r"the server answered 200, but it is an HTML page; nothing was put"):
        Store(tmp_path / "store", check=_no_html).fetch(url)
    assert not list(Store(tmp_path / "store").path_of(url).parent.glob("page.json*"))
    assert Store(tmp_path / "store").fetch(url).read_bytes().startswith(b"<html")  # no check: any body is fine


def test_the_hints_end_the_messages(tmp_path, server):
    url = server.url("data/notes.txt")
    offline = Store(tmp_path / "store", offline="no network here")
    with pytest.raises(FetchError) as err:
        offline.fetch(url, what="the notes", offline_hint="fetch them elsewhere")
    assert str(err.value) == (
        f"no network here and the notes is not in the cache ({offline.path_of(url)}); fetch them elsewhere"
    )
    assert sum(server.hits.values()) == 0
    Store(tmp_path / "store").fetch(url)
    assert offline.fetch(url).read_bytes() == BODY  # once stored, an offline store hands it out
    with pytest.raises(FetchError, match=r"is expected; delete .* or run the retry command to fetch it again$"):
        offline.fetch(url, sha256="0" * 64, retry_hint="run the retry command")


def test_archives_of_any_content_unpack_once_and_name_their_source(tmp_path):
    archive = tmp_path / "any.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("docs/readme.txt", "no model here")
    archive.write_bytes(buffer.getvalue())
    store = Store(tmp_path / "store")
    folder = store.unpacked(archive, source="https://example.org/any.zip")
    assert (folder / "docs" / "readme.txt").read_text() == "no model here"
    assert store.unpacked(archive) == folder
    assert store.entry_of(folder / "docs" / "readme.txt") == (folder, "https://example.org/any.zip")
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(FetchError, match=r"leads outside the archive"):
        store.unpacked(bad)


def test_the_fetcher_knows_no_model_and_the_package_error_is_both():
    assert not issubclass(FetchError, WeightFileError)
    assert issubclass(DownloadError, WeightFileError) and issubclass(DownloadError, FetchError)
    assert is_url("https://example.org/a.tar.gz") and not is_url("a.tar.gz") and is_archive("a.tgz")


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _unpacked_folders(root):
    return sorted(p.name for p in (root / "archives").iterdir() if not p.name.startswith("."))


def _copy_tree(source, target, *, keep_times):
    """``cp -a`` (times kept) or ``cp -r`` (every file written anew, with a new mtime)."""
    shutil.copytree(source, target, copy_function=shutil.copy2 if keep_times else shutil.copyfile)


@pytest.mark.parametrize("keep_times", [True, False], ids=["cp -a", "cp -r"])
def test_a_copied_store_finds_its_unpacked_archives_by_content(tmp_path, keep_times):
    """An unpacked archive was keyed on the archive's absolute path and mtime: a downloaded archive in a copied store
    (another path), or a local archive copied elsewhere, was unpacked a second time."""
    srv = LoopbackServer({"any.zip": _zip(tmp_path / "any.zip", {"docs/readme.txt": b"no model"}).read_bytes()})
    try:
        url = srv.url("any.zip")
        first = Store(tmp_path / "first")
        by_url = first.unpacked(first.fetch(url), source=url)
        local = first.unpacked(tmp_path / "any.zip")
        _copy_tree(tmp_path / "first", tmp_path / "copy", keep_times=keep_times)
        (tmp_path / "elsewhere").mkdir()
        (shutil.copy2 if keep_times else shutil.copyfile)(tmp_path / "any.zip", tmp_path / "elsewhere" / "any.zip")
        copy = Store(tmp_path / "copy", offline="offline")
        before = _unpacked_folders(tmp_path / "copy")
        assert copy.unpacked(copy.fetch(url), source=url).name == by_url.name
        assert copy.unpacked(tmp_path / "elsewhere" / "any.zip").name == by_url.name
        assert _unpacked_folders(tmp_path / "copy") == before  # nothing unpacked again
        assert srv.hits["any.zip"] == 1
        assert local == by_url  # the same bytes, one folder, whoever named them first
    finally:
        srv.stop()


def test_a_read_only_store_hands_out_complete_entries_and_says_what_to_do_for_the_rest(tmp_path, server, read_only):
    """A read-only store raised a raw PermissionError / OSError on the lock of a complete unpacked archive; now its
    complete entries are read without a write (no lock) and anything that needs one is one line naming the folder."""
    root = tmp_path / "store"
    local = _zip(tmp_path / "any.zip", {"docs/readme.txt": b"no model"})
    srv = LoopbackServer({"any.zip": local.read_bytes()})
    try:
        url, archive_url = server.url("data/notes.txt"), srv.url("any.zip")
        writable = Store(root)
        writable.fetch(url)
        by_url = writable.unpacked(writable.fetch(archive_url), source=archive_url)
        local_folder = writable.unpacked(local)
        for lock in root.rglob("*.lock"):
            lock.unlink()  # as a copy made without them would be
        read_only.add(root)
        store = Store(root, unwritable_hint="point the store elsewhere")
        assert store.fetch(url).read_bytes() == BODY
        assert store.unpacked(store.fetch(archive_url), source=archive_url) == by_url
        assert store.unpacked(local) == local_folder == by_url
        assert read_only.attempts == [] and not list(root.rglob("*.lock"))
        other = _zip(tmp_path / "other.zip", {"other.txt": b"another archive"})
        for needs_a_write in (
            lambda: store.fetch(server.url("data/page.json")),
            lambda: store.unpacked(other),
            lambda: store.forget(url),
        ):
            with pytest.raises(FetchError) as err:
                needs_a_write()
            message = str(err.value)
            assert "\n" not in message and "cannot write" in message and "Read-only file system" in message, message
            assert str(root) in message and message.endswith("; point the store elsewhere"), message
        assert server.hits["data/page.json"] == 0 and store.fetch(url).read_bytes() == BODY  # nothing was lost
    finally:
        srv.stop()


def test_a_local_archive_is_hashed_once_while_it_stays_the_same(tmp_path, monkeypatch):
    """Keying on content costs a read of the archive: paid once, then remembered (in the store, for other processes)
    while its path, size, times, inode and ends stay the same; an archive rewritten in place is hashed again."""
    import spacy_elmo.sources.fetch as fetch

    archive = _zip(tmp_path / "any.zip", {"a.txt": b"one"})
    hashed = []
    real = fetch._sha256_of
    monkeypatch.setattr(fetch, "_sha256_of", lambda path: hashed.append(path) or real(path))
    store = Store(tmp_path / "store")
    folder = store.unpacked(archive)
    fetch._SHA256_MEMOS.clear()  # as a new process: what the store remembered
    assert store.unpacked(archive) == folder and hashed == [archive]
    (memo,) = (tmp_path / "store" / "archives" / ".sha256").iterdir()
    memo.write_text(memo.read_text().replace(str(folder.name), "../../x"))  # a remembered sha256 that is none
    fetch._SHA256_MEMOS.clear()
    assert store.unpacked(archive) == folder and hashed == [archive, archive]  # ignored: hashed again
    before = archive.stat()
    _zip(archive, {"a.txt": b"two"})  # the same size, in place, its mtime put back
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert archive.stat().st_size == before.st_size
    fetch._SHA256_MEMOS.clear()
    changed = store.unpacked(archive)
    assert changed != folder and (changed / "a.txt").read_bytes() == b"two" and len(hashed) == 3


def test_a_folder_an_older_version_unpacked_is_still_read(tmp_path):
    """Folders unpacked under the old key (the archive's path, size and mtime) are read, not unpacked again."""
    archive = _zip(tmp_path / "any.zip", {"a.txt": b"one"}).resolve()
    info = archive.stat()
    old_key = hashlib.sha256(f"{archive}:{info.st_size}:{info.st_mtime_ns}".encode()).hexdigest()[:16]
    legacy = tmp_path / "store" / "archives" / old_key
    legacy.mkdir(parents=True)
    (legacy / "a.txt").write_bytes(b"one")
    (legacy / ".complete").write_text(str(archive), encoding="utf-8")
    store = Store(tmp_path / "store")
    assert store.unpacked(archive) == legacy and _unpacked_folders(tmp_path / "store") == [old_key]
    assert store.forget(str(archive)) == [legacy]  # and forgotten by its label
