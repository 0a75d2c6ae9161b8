"""spacy_elmo.sources.fetch on its own: a store that knows no file format and no command, on a loopback server."""

import hashlib
import io
import zipfile

import pytest

from spacy_elmo.bilm.weights import WeightFileError
from spacy_elmo.sources.download import DownloadError
from spacy_elmo.sources.fetch import FetchError, Store, is_archive, is_url
from tests.sources.test_download import LoopbackServer

BODY = b"plain text, no model format at all\n" * 100


@pytest.fixture()
def server():
    srv = LoopbackServer({"data/notes.txt": BODY, "data/page.json": b"<html>an error page</html>"})
    yield srv
    srv.stop()


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
