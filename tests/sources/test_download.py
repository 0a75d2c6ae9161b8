"""Published models, URLs and archives, against a loopback HTTP server this test starts (no real network)."""

import email.utils
import errno
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import spacy
from typer.testing import CliRunner

import spacy_elmo.sources.published
from spacy_elmo import ElmoVectorizer, load_bilm
from spacy_elmo.bilm.weights import WeightFileError
from spacy_elmo.sources.download import DownloadError
from spacy_elmo.sources.published import PublishedModel
from tests.numerics import assert_recomputed_close


class LoopbackServer:
    """Serves ``files`` (path -> bytes) on 127.0.0.1; counts GETs; can cut transfers off, refuse ranges, and misbehave.

    Replies carry a strong ETag (the sha256 of the body) and a Last-Modified date (``validators``
    picks which); a Range request is served as 206 unless its If-Range names another version
    (then the whole file, 200), as HTTP wants. The misbehaviours a test can switch on: ``error_pages``
    (path -> how many GETs get a 200 HTML page instead), ``ignore_if_range`` (206 of the new version
    whatever If-Range says), ``range_shift`` (a 206 whose range starts that many bytes early),
    ``gzip`` ("negotiated": when the client accepts it; "always": whatever it asked), ``unsatisfiable``
    (416 to every Range request).
    """

    def __init__(self, files, ranges=True, delay=0.0, validators=("etag", "last-modified")):
        self.files = dict(files)
        self.hits = Counter()
        self.range_requests = Counter()
        self.if_range = []  # the If-Range header of each Range request
        self.cut_next = Counter()  # path -> how many of the next GETs stop half way
        self.error_pages = Counter()
        self.ranges = ranges
        self.delay = delay
        self.validators = validators
        self.ignore_if_range = False
        self.range_shift = 0
        self.gzip = None
        self.unsatisfiable = False
        self.on_cut = (
            None  # called when a transfer is cut off, before the client sees it (e.g. to publish a new version)
        )
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner._serve(self, body=True)

            def do_HEAD(self):
                owner._serve(self, body=False)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def version(self, data):
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        modified = email.utils.formatdate(
            1_700_000_000 + int.from_bytes(hashlib.sha256(data).digest()[:3], "big"), usegmt=True
        )
        return etag, modified

    def _serve(self, handler, body):
        path = handler.path.lstrip("/")
        data = self.files.get(path)
        if data is None:
            handler.send_error(404, "Not Found")
            return
        if body:
            self.hits[path] += 1
        if body and self.error_pages[path] > 0:
            self.error_pages[path] -= 1
            page = b"<!DOCTYPE html><html><body><h1>Service unavailable</h1>try again later</body></html>"
            handler.send_response(200)
            handler.send_header("Content-Type", "text/html")
            handler.send_header("Content-Length", str(len(page)))
            handler.end_headers()
            handler.wfile.write(page)
            return
        etag, modified = self.version(data)
        start = 0
        wanted = handler.headers.get("Range") if self.ranges else None
        if wanted and wanted.startswith("bytes="):
            self.if_range.append(handler.headers.get("If-Range"))
            condition = handler.headers.get("If-Range")
            if condition is not None and condition not in (etag, modified) and not self.ignore_if_range:
                wanted = None  # another version: the whole file
        if wanted and wanted.startswith("bytes=") and self.unsatisfiable:
            handler.send_error(416, "Range Not Satisfiable")
            return
        gzipped = self.gzip == "always" or (
            self.gzip == "negotiated" and "gzip" in handler.headers.get("Accept-Encoding", "")
        )
        if wanted and wanted.startswith("bytes="):
            start = max(0, int(wanted[len("bytes=") :].split("-")[0]) - self.range_shift)
            self.range_requests[path] += body
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            handler.send_response(200)
        payload = data[start:]
        if gzipped:
            payload = gzip.compress(payload)
            handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(payload)))
        if "etag" in self.validators:
            handler.send_header("ETag", etag)
        if "last-modified" in self.validators:
            handler.send_header("Last-Modified", modified)
        if self.ranges:
            handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        if not body:
            return
        if self.cut_next[path] > 0:
            self.cut_next[path] -= 1
            handler.wfile.write(payload[: len(payload) // 2])
            handler.wfile.flush()
            if self.on_cut is not None:  # before the client can see the cut (and ask again): no race with its retry
                self.on_cut()
            handler.close_connection = True
            handler.connection.shutdown(2)  # the client sees the connection close mid-body
            return
        for i in range(0, len(payload), 65536):
            if self.delay:
                time.sleep(self.delay)
            handler.wfile.write(payload[i : i + 65536])


class ReadOnly:
    """Every write under the folders it is given fails as on a read-only mount (EROFS), and is recorded.

    What ``chmod -R a-w`` does to a user who is not root, or a read-only mount to anyone: root ignores permission
    bits, so a suite run as root (containers) cannot make a folder read-only with chmod. The calls patched are
    those a Python writer goes through (``os.open`` with a write flag, ``open``/``io.open`` for writing,
    ``os.mkdir`` of a new folder, ``os.replace``/``rename``/``unlink``/``rmdir``) and ``os.access(W_OK)``;
    :func:`test_a_read_only_cache_in_another_process` checks the same with a real read-only folder.
    """

    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def __init__(self, monkeypatch):
        self.roots: list[Path] = []
        self.attempts: list[str] = []
        real = {name: getattr(os, name) for name in ("open", "mkdir", "replace", "rename", "unlink", "rmdir", "access")}
        real_open = io.open

        def guarded(name):
            def call(path, *args, **kwargs):
                for target in (path, *args[:1]) if name in ("replace", "rename") else (path,):
                    self._refuse(target)
                return real[name](path, *args, **kwargs)

            return call

        def os_open(path, flags, *args, **kwargs):
            if flags & self._WRITE_FLAGS:
                self._refuse(path)
            return real["open"](path, flags, *args, **kwargs)

        def mkdir(path, *args, **kwargs):
            if not os.path.exists(path):
                self._refuse(path)
            return real["mkdir"](path, *args, **kwargs)

        def io_open(file, mode="r", *args, **kwargs):
            if any(flag in mode for flag in "wax+"):
                self._refuse(file)
            return real_open(file, mode, *args, **kwargs)

        def access(path, mode, *args, **kwargs):
            if mode & os.W_OK and self._under(path):
                return False
            return real["access"](path, mode, *args, **kwargs)

        for name in ("replace", "rename", "unlink", "rmdir"):
            monkeypatch.setattr(os, name, guarded(name))
        monkeypatch.setattr(os, "remove", guarded("unlink"))
        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(os, "mkdir", mkdir)
        monkeypatch.setattr(os, "access", access)
        monkeypatch.setattr(io, "open", io_open)
        monkeypatch.setattr("builtins.open", io_open)

    def add(self, root: Path) -> None:
        self.roots.append(Path(os.path.abspath(root)))

    def _under(self, path) -> bool:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return False  # a file descriptor
        absolute = Path(os.path.abspath(os.fsdecode(path)))
        return any(absolute == root or root in absolute.parents for root in self.roots)

    def _refuse(self, path) -> None:
        if self._under(path):
            self.attempts.append(os.fsdecode(path))
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))


@pytest.fixture()
def read_only(monkeypatch):
    """``read_only.add(folder)``: writes under ``folder`` fail (EROFS) and are listed in ``read_only.attempts``."""
    return ReadOnly(monkeypatch)


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """An empty download cache for this test, network allowed."""
    path = tmp_path / "elmo_home"
    monkeypatch.setenv("SPACY_ELMO_HOME", str(path))
    monkeypatch.delenv("SPACY_ELMO_OFFLINE", raising=False)
    return path


@pytest.fixture()
def model_bytes(fixture_dir):
    return {
        "m/options.json": (fixture_dir / "options.json").read_bytes(),
        "m/weights.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
    }


@pytest.fixture()
def server(model_bytes):
    srv = LoopbackServer(model_bytes)
    yield srv
    srv.stop()


# what a test entry of the published models says of its model (fixture-sized, made by "test")
TEST_ENTRY = dict(architecture="fixture", parameters_m=0.1, approx_mb=1, trained_on="test", source="test")


def publish_test_model(monkeypatch, name: str, **fields) -> PublishedModel:
    """A published model ``name`` for this test only (a test entry in the table), its files where ``fields`` say:
    options_url and weights_url, or archive_url."""
    entry = PublishedModel(name=name, **{"options_url": None, "weights_url": None, **TEST_ENTRY, **fields})
    monkeypatch.setitem(spacy_elmo.sources.published.PUBLISHED, name, entry)
    return entry


def _publish(monkeypatch, server, name="loopback-test", **kw):
    urls = dict(options_url=server.url("m/options.json"), weights_url=server.url("m/weights.hdf5"))
    return publish_test_model(monkeypatch, name, **urls, **kw)


def test_a_name_downloads_once_and_loads_offline_afterwards(home, server, monkeypatch, backend, fixture_sentences):
    _publish(monkeypatch, server)
    elmo = load_bilm("loopback-test")
    assert elmo.fingerprint == backend.fingerprint  # the same bytes as the fixture
    assert server.hits == Counter({"m/options.json": 1, "m/weights.hdf5": 1})
    assert_recomputed_close(elmo.embed(fixture_sentences[:2])[0], backend.embed(fixture_sentences[:2])[0])
    server.stop()
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    again = load_bilm("loopback-test")
    assert again is elmo and sum(server.hits.values()) == 2
    records = sorted(home.glob("downloads/*/*.*.json"))  # NAME.json beside each NAME
    assert len(records) == 2 and all(len(json.loads(r.read_text())["sha256"]) == 64 for r in records)


def test_transfer_cut_off_without_ranges_is_reported_and_the_next_load_succeeds(home, model_bytes, monkeypatch):
    srv = LoopbackServer(model_bytes, ranges=False)
    try:
        _publish(monkeypatch, srv)
        srv.cut_next["m/weights.hdf5"] = 1
        with pytest.raises(DownloadError, match="cut off"):
            load_bilm("loopback-test")
        leftovers = [p.name for p in home.glob("downloads/*/*") if p.name.startswith("weights.hdf5")]
        assert leftovers == []  # no truncated file, no record, no stale .part
        assert load_bilm("loopback-test").n_layers == 2
        assert srv.hits["m/weights.hdf5"] == 2
    finally:
        srv.stop()


def test_transfer_cut_off_is_resumed_with_a_range_request(home, server, monkeypatch, model_bytes):
    _publish(monkeypatch, server)
    server.cut_next["m/weights.hdf5"] = 1
    elmo = load_bilm("loopback-test")
    assert server.range_requests["m/weights.hdf5"] == 1 and server.hits["m/weights.hdf5"] == 2
    assert elmo.weights_path.read_bytes() == model_bytes["m/weights.hdf5"]


def test_a_transfer_cut_off_at_every_attempt_keeps_its_bytes_for_the_next_call(home, server, monkeypatch, model_bytes):
    _publish(monkeypatch, server)
    server.cut_next["m/weights.hdf5"] = 3  # every attempt of one call
    with pytest.raises(DownloadError, match=r"cut off .*no incomplete file was put in the cache; the [\d,]+ bytes"):
        load_bilm("loopback-test")
    assert server.hits["m/weights.hdf5"] == 3 and server.range_requests["m/weights.hdf5"] == 2
    assert _cached_weights(home) == ["weights.hdf5.part", "weights.hdf5.part.json"]
    elmo = load_bilm("loopback-test")  # the next call resumes what the last one kept
    assert server.hits["m/weights.hdf5"] == 4 and server.range_requests["m/weights.hdf5"] == 3
    assert elmo.weights_path.read_bytes() == model_bytes["m/weights.hdf5"]


def test_a_416_to_a_resume_starts_again_from_zero(home, server, monkeypatch, model_bytes):
    _publish(monkeypatch, server)
    server.cut_next["m/weights.hdf5"] = 1
    server.unsatisfiable = True
    elmo = load_bilm("loopback-test")
    assert server.hits["m/weights.hdf5"] == 3 and server.range_requests["m/weights.hdf5"] == 0  # cut, 416, whole
    assert len(server.if_range) == 1
    assert elmo.weights_path.read_bytes() == model_bytes["m/weights.hdf5"]
    assert _cached_weights(home) == ["weights.hdf5", "weights.hdf5.json"]


def test_wrong_sha256_is_refused(home, server, monkeypatch):
    _publish(monkeypatch, server, weights_sha256="0" * 64)
    with pytest.raises(DownloadError, match=r"sha256 .* but 0{64} is expected; refused"):
        load_bilm("loopback-test")
    assert not [p for p in home.glob("downloads/*/weights.hdf5*")]


def test_a_file_that_changed_since_its_first_download_is_refused(home, server, monkeypatch):
    _publish(monkeypatch, server)
    load_bilm("loopback-test")
    cached = next(home.glob("downloads/*/weights.hdf5"))
    cached.unlink()  # gone from the cache, but the record of its first download stays
    server.files["m/weights.hdf5"] = server.files["m/weights.hdf5"][:-1] + b"\x01"
    with pytest.raises(DownloadError, match="recorded at the first download"):
        load_bilm("loopback-test")


def test_404_and_refused_connections_are_clear_errors(home, server):
    with pytest.raises(DownloadError, match=r"nothing\.json.* 404"):
        load_bilm(options=server.url("nothing.json"), weights=server.url("m/weights.hdf5"))
    url = server.url("m/options.json")
    server.stop()
    with pytest.raises(DownloadError, match="could not connect"):
        load_bilm(options=url, weights=url.replace("options.json", "weights.hdf5"))


def test_no_network_is_one_short_line_naming_the_host_and_the_way_out(home, monkeypatch):
    """`spacy-elmo download NAME` where the server cannot be reached: one line naming the host and what to do, not
    requests' 400-character repr of urllib3's nested errors, clipped."""
    from spacy_elmo.cli import app

    with socket.socket() as closed:  # bound and not listening: connections to it are refused, and no one else takes it
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        publish_test_model(
            monkeypatch,
            "loopback-closed",
            options_url=f"http://127.0.0.1:{port}/m/options.json",
            weights_url=f"http://127.0.0.1:{port}/m/weights.hdf5",
        )
        result = CliRunner().invoke(app, ["download", "loopback-closed"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 200, lines
    line = lines[0]
    assert f"could not connect to 127.0.0.1:{port} (connection refused)" in line, line
    assert "network or proxy" in line and "folder" in line, line  # the way out
    assert "model 'loopback-closed'" in line and "HTTPConnectionPool" not in line, line
    assert not list(home.rglob("*.part")), list(home.rglob("*"))


def test_offline_mode_names_the_model_the_cache_and_the_command(home, server, monkeypatch):
    _publish(monkeypatch, server)
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    with pytest.raises(DownloadError) as err:
        load_bilm("loopback-test")
    message = str(err.value)
    assert "offline mode is on" in message and "model 'loopback-test'" in message
    assert str(home) in message and "spacy-elmo download loopback-test" in message
    assert sum(server.hits.values()) == 0


_CONCURRENT = """
import sys
from spacy_elmo import load_bilm
print(load_bilm(options=sys.argv[1], weights=sys.argv[2]).fingerprint)
"""


@pytest.mark.slow
def test_two_processes_loading_one_url_download_it_once(home, model_bytes):
    srv = LoopbackServer(model_bytes, delay=0.05)  # slow enough that the two downloads would overlap
    try:
        args = [srv.url("m/options.json"), srv.url("m/weights.hdf5")]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _CONCURRENT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        results = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], results
        assert results[0][0] == results[1][0]
        assert srv.hits == Counter({"m/options.json": 1, "m/weights.hdf5": 1})
    finally:
        srv.stop()


def _nlpl_archive(fixture_dir, path: Path, extra=None):
    """The NLPL repository layout (options.json, model.hdf5, vocab.txt) in a top folder, as .zip or .tar.gz."""
    members = {
        "elmo/options.json": (fixture_dir / "options.json").read_bytes(),
        "elmo/model.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
        "elmo/vocab.txt": b"the\nbank\n",
        **(extra or {}),
    }
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(path, "w") as zf:
            for name, data in members.items():
                zf.writestr(name, data)
    else:
        with tarfile.open(path, "w:gz") as tf:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_archives_load_from_a_path_and_a_url(home, fixture_dir, tmp_path, backend, suffix):
    archive = _nlpl_archive(fixture_dir, tmp_path / f"elmo{suffix}")
    assert load_bilm(archive).fingerprint == backend.fingerprint
    unpacked = list(home.glob("archives/*/elmo/model.hdf5"))
    assert len(unpacked) == 1
    srv = LoopbackServer({f"elmo{suffix}": archive.read_bytes()})
    try:
        assert load_bilm(srv.url(f"elmo{suffix}")).fingerprint == backend.fingerprint
        load_bilm(srv.url(f"elmo{suffix}"))
        assert srv.hits[f"elmo{suffix}"] == 1  # downloaded and unpacked once
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "member, message",
    [("../evil.txt", r"leads outside the archive"), ("/etc/evil.txt", "absolute path")],
)
@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_unsafe_archive_members_are_refused(home, fixture_dir, tmp_path, suffix, member, message):
    archive = _nlpl_archive(fixture_dir, tmp_path / f"bad{suffix}", extra={member: b"x"})
    with pytest.raises(DownloadError, match=message):
        load_bilm(archive)
    assert not (tmp_path / "evil.txt").exists() and not list(home.glob("archives/*/elmo"))


def test_links_in_an_archive_are_refused(home, fixture_dir, tmp_path):
    archive = _nlpl_archive(fixture_dir, tmp_path / "link.tar.gz")
    with tarfile.open(archive, "w:gz") as tf:  # rewrite with a symbolic link member
        info = tarfile.TarInfo("elmo/options.json")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(DownloadError, match="symbolic link"):
        load_bilm(archive)


def test_spacy_component_and_vectorizer_with_a_url_model(home, fixture_dir, tmp_path, backend):
    archive = _nlpl_archive(fixture_dir, tmp_path / "elmo.zip")
    srv = LoopbackServer({"elmo.zip": archive.read_bytes()})
    try:
        url = srv.url("elmo.zip")
        nlp = spacy.blank("en")
        nlp.add_pipe("elmo", config={"model": url})
        doc = nlp("The bank approved it .")
        assert doc._.elmo_model == backend.fingerprint
        nlp.to_disk(tmp_path / "pipeline")
        saved = json.loads((tmp_path / "pipeline" / "elmo" / "model" / "model.json").read_text())
        assert saved == {
            "source": "remote",
            "model": url,
            "fingerprint": backend.fingerprint,
            "files_fingerprint": backend.files_fingerprint,
        }  # a reference, not a copy
        assert not (tmp_path / "pipeline" / "elmo" / "model" / "weights.hdf5").exists()
        loaded = spacy.load(tmp_path / "pipeline")
        assert loaded("A bank .")._.elmo_model == backend.fingerprint
        X = ElmoVectorizer(model=url).fit_transform(["The bank approved it ."])
        assert X.shape == (1, backend.dim)
        assert srv.hits["elmo.zip"] == 1
    finally:
        srv.stop()


def test_a_local_folder_wins_over_a_published_name(home, fixture_dir, tmp_path, monkeypatch, backend):
    shutil.copytree(fixture_dir, tmp_path / "small")
    monkeypatch.chdir(tmp_path)
    assert load_bilm("small").fingerprint == backend.fingerprint  # no network: the local folder


def _cached_cell(listing: str, name: str) -> str:
    """The "cached" cell of ``name``'s row in `spacy-elmo models` (cells are at least two spaces apart)."""
    header = next(line for line in listing.splitlines() if line.startswith("name "))
    row = next(line for line in listing.splitlines() if line.startswith(f"{name} "))
    return re.split(r"\s{2,}", row)[re.split(r"\s{2,}", header).index("cached")]


def test_cli_download_and_models(home, server, monkeypatch):
    from spacy_elmo.cli import app

    _publish(monkeypatch, server)
    runner = CliRunner()
    listed = runner.invoke(app, ["models"])
    assert listed.exit_code == 0 and "original-5.5B" in listed.output
    assert _cached_cell(listed.output, "loopback-test") == "no"
    fetched = runner.invoke(app, ["download", "loopback-test"])
    assert fetched.exit_code == 0, fetched.output
    assert _cached_cell(runner.invoke(app, ["models"]).output, "loopback-test") == "yes"
    missing = runner.invoke(app, ["download", server.url("nope.hdf5")])
    assert missing.exit_code == 2 and "404" in missing.output and "Traceback" not in missing.output
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    offline = runner.invoke(app, ["embed", "-", str(home / "x.hdf5"), "--model", "original"], input="a b\n")
    assert offline.exit_code == 2 and "offline mode is on" in offline.output


def test_published_table_names_the_allennlp_models():
    from spacy_elmo.sources.published import PUBLISHED, published_by_url

    for name in ("small", "medium", "original", "original-5.5B", "pubmed"):
        entry = PUBLISHED[name]
        assert entry.options_url.startswith("https://") and entry.weights_url.endswith(".hdf5")
    url = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
    assert published_by_url(url).name == "original"  # AllenNLP's own default URL spelling


# -- servers that misbehave, archives that explode ----------------------------------------


def _cached_weights(home):
    return sorted(p.name for p in home.glob("downloads/*/weights.hdf5*"))


@pytest.fixture(scope="module")
def second_version(fixture_dir, tmp_path_factory):
    """Another valid weight file for the fixture's options (every parameter x 1.01): the file "changed on the
    server"."""
    import torch

    from spacy_elmo.bilm import load_model
    from spacy_elmo.bilm.weights import write_weights_file

    model = load_model(fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.01)
    path = tmp_path_factory.mktemp("v2") / "weights.hdf5"
    write_weights_file(model, path, shown_as=path)
    return path.read_bytes()


def test_an_html_error_page_answered_with_200_is_refused_and_never_cached(home, server, monkeypatch, backend):
    """Item 1: the page was cached as weights.hdf5 with its sha256 recorded; the model stayed broken after the server
    recovered."""
    _publish(monkeypatch, server)
    server.error_pages["m/weights.hdf5"] = 1
    with pytest.raises(
        DownloadError, match=r"the server answered 200, but it is an HTML page.*nothing was put in the cache"
    ):
        load_bilm("loopback-test")
    assert _cached_weights(home) == []  # no file, no record, no .part
    assert load_bilm("loopback-test").fingerprint == backend.fingerprint  # the server recovered: fetched again
    assert server.hits["m/weights.hdf5"] == 2


def test_a_poisoned_entry_from_before_is_fetched_again(home, server, monkeypatch, backend):
    """A cache filled by an older version (an error page stored with its record) heals itself on the next load."""
    entry = _publish(monkeypatch, server)
    load_bilm("loopback-test")
    cached = next(home.glob("downloads/*/weights.hdf5"))
    page = b"<html><body>Login required</body></html>"
    cached.write_bytes(page)
    record = cached.with_name("weights.hdf5.json")
    record.write_text(
        json.dumps({"url": entry.weights_url, "size": len(page), "sha256": hashlib.sha256(page).hexdigest()})
    )
    assert load_bilm("loopback-test").fingerprint == backend.fingerprint
    assert json.loads(record.read_text())["sha256"] == hashlib.sha256(server.files["m/weights.hdf5"]).hexdigest()


def test_a_damaged_cached_file_names_the_folder_and_the_force_command(home, server, monkeypatch, backend):
    import h5py

    from spacy_elmo.cli import app

    _publish(monkeypatch, server)
    load_bilm("loopback-test")
    cached = next(home.glob("downloads/*/weights.hdf5"))
    with h5py.File(cached, "r+") as handle:  # still an HDF5 file of the recorded size, but NaN in a weight
        handle["CNN_proj/b_proj"][0] = float("nan")
    with pytest.raises(WeightFileError) as err:
        load_bilm("loopback-test")
    message = str(err.value)
    assert f"delete {cached.parent}" in message and "`spacy-elmo download --force loopback-test`" in message
    forced = CliRunner().invoke(app, ["download", "--force", "loopback-test"])
    assert forced.exit_code == 0, forced.output
    assert f"removed {cached}" in forced.output
    assert load_bilm("loopback-test").fingerprint == backend.fingerprint
    assert server.hits["m/weights.hdf5"] == 2


@pytest.mark.parametrize(
    "validators, ignore_if_range",
    [(("etag",), False), (("last-modified",), False), (("etag", "last-modified"), True), ((), False)],
    ids=["etag", "last-modified", "server-ignores-if-range", "no-version"],
)
def test_a_resume_never_splices_two_versions(
    home, model_bytes, monkeypatch, second_version, validators, ignore_if_range
):
    """Item 2: the file changed on the server between the cut-off transfer and the resume; old + new bytes were
    appended."""
    srv = LoopbackServer(model_bytes, validators=validators)
    try:
        _publish(monkeypatch, srv)
        first_version = srv.version(model_bytes["m/weights.hdf5"])
        srv.ignore_if_range = ignore_if_range
        srv.cut_next["m/weights.hdf5"] = 1
        srv.on_cut = lambda: srv.files.__setitem__("m/weights.hdf5", second_version)
        if validators:
            elmo = load_bilm("loopback-test")
            assert srv.if_range == [first_version[0] if "etag" in validators else first_version[1]]
        else:  # nothing to name the version by: not resumed, started again from zero on the next try
            with pytest.raises(DownloadError, match="cut off"):
                load_bilm("loopback-test")
            assert _cached_weights(home) == []
            elmo = load_bilm("loopback-test")
            assert srv.if_range == []
        assert elmo.weights_path.read_bytes() == second_version
        assert _cached_weights(home) == ["weights.hdf5", "weights.hdf5.json"]  # no .part, no .part.json left
    finally:
        srv.stop()


def test_a_206_from_another_offset_starts_again_from_zero(home, server, monkeypatch, model_bytes, backend):
    """Item 3: a 206 whose Content-Range starts elsewhere was appended: an oversized file, its sha256 recorded."""
    _publish(monkeypatch, server)
    server.range_shift = 1000
    server.cut_next["m/weights.hdf5"] = 1
    elmo = load_bilm("loopback-test")
    assert elmo.weights_path.read_bytes() == model_bytes["m/weights.hdf5"] and elmo.fingerprint == backend.fingerprint
    assert (
        server.range_requests["m/weights.hdf5"] == 1 and server.hits["m/weights.hdf5"] == 3
    )  # cut, refused 206, whole


@pytest.mark.parametrize("mode", ["negotiated", "always"])
def test_a_gzip_content_encoding_still_loads(home, server, monkeypatch, model_bytes, backend, mode):
    """Item 4: requests decoded the body and compared it with the compressed Content-Length: "cut off", a bogus
    .part."""
    _publish(monkeypatch, server)
    server.gzip = mode  # "always": a server that compresses whatever the client asked for
    elmo = load_bilm("loopback-test")
    assert elmo.weights_path.read_bytes() == model_bytes["m/weights.hdf5"] and elmo.fingerprint == backend.fingerprint
    assert _cached_weights(home) == ["weights.hdf5", "weights.hdf5.json"]


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, read in pieces (so building a bomb needs no gigabyte in memory)."""

    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = bytes(n)
        self.left -= n
        return n


def _bomb(fixture_dir, path, size):
    """An ELMo archive plus a member of ``size`` zero bytes, which compresses about 1000:1."""
    _nlpl_archive(fixture_dir, path)
    if path.name.endswith(".zip"):
        with (
            zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as zf,
            zf.open("elmo/vocab.big", "w", force_zip64=True) as out,
        ):
            shutil.copyfileobj(_Zeros(size), out, 1 << 20)
    else:
        with tarfile.open(path, "r:gz") as tf:
            members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
        with tarfile.open(path, "w:gz") as tf:
            for info, data in members:
                tf.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo("elmo/vocab.big")
            info.size = size
            tf.addfile(info, io.BufferedReader(_Zeros(size), 1 << 20))
    return path


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_an_archive_bomb_is_refused_before_anything_is_written(home, fixture_dir, tmp_path, suffix, monkeypatch):
    """Item 5: a small archive whose member expands to far more was written out until the disk or a limit stopped it."""
    import spacy_elmo.sources.fetch

    archive = _bomb(fixture_dir, tmp_path / f"bomb{suffix}", 96 << 20)
    assert archive.stat().st_size < 1 << 20
    written = []
    real = spacy_elmo.sources.fetch._write_member
    monkeypatch.setattr(
        spacy_elmo.sources.fetch,
        "_write_member",
        lambda into, member, *a: written.append(member) or real(into, member, *a),
    )
    with pytest.raises(
        DownloadError, match=r"member 'elmo/vocab\.big' would bring .* more than 100 times .*archive bomb"
    ):
        load_bilm(archive)
    assert written == [] and list((home / "archives").iterdir()) == [next((home / "archives").glob(".*.lock"))]


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_an_archive_larger_than_the_free_space_is_refused(home, fixture_dir, tmp_path, suffix, monkeypatch):
    import spacy_elmo.sources.fetch

    archive = _nlpl_archive(fixture_dir, tmp_path / f"elmo{suffix}")
    monkeypatch.setattr(
        spacy_elmo.sources.fetch,
        "_free_bytes",
        lambda folder: spacy_elmo.sources.fetch.FREE_RESERVE_BYTES + 100_000,
    )
    with pytest.raises(
        DownloadError,
        match=r"needs 0\.4 MiB by member 'elmo/model\.hdf5', but only 0\.1 MiB can be used.*free some disk space",
    ):
        load_bilm(archive)
    assert not list(home.glob("archives/*/elmo"))


def test_an_archive_url_without_the_elmo_layout_is_not_cached(home, fixture_dir, tmp_path):
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("readme.txt", "no model here")
    srv = LoopbackServer({"other.zip": archive.read_bytes()})
    try:
        with pytest.raises(DownloadError, match=r"it holds no options\.json"):
            load_bilm(srv.url("other.zip"))
        assert not list(home.glob("downloads/*/other.zip*"))
    finally:
        srv.stop()


def test_a_damaged_unpacked_archive_names_its_folder_and_force_unpacks_it_again(home, fixture_dir, tmp_path, backend):
    import h5py

    from spacy_elmo.cli import app

    archive = _nlpl_archive(fixture_dir, tmp_path / "elmo.tar.gz")
    srv = LoopbackServer({"elmo.tar.gz": archive.read_bytes()})
    try:
        url = srv.url("elmo.tar.gz")
        load_bilm(url)
        unpacked = next(home.glob("archives/*/elmo/model.hdf5"))
        with h5py.File(unpacked, "r+") as handle:
            handle["CNN_proj/b_proj"][0] = float("inf")
        with pytest.raises(WeightFileError) as err:
            load_bilm(url)
        assert f"delete {unpacked.parent.parent}" in str(err.value) and f"`spacy-elmo download --force {url}`" in str(
            err.value
        )
        forced = CliRunner().invoke(app, ["download", "--force", url])
        assert forced.exit_code == 0, forced.output
        assert load_bilm(url).fingerprint == backend.fingerprint and srv.hits["elmo.tar.gz"] == 2
    finally:
        srv.stop()


def test_info_of_a_published_model_reads_the_table_and_downloads_nothing(home, server, monkeypatch):
    from spacy_elmo.cli import app

    _publish(monkeypatch, server)
    shown = CliRunner().invoke(app, ["info", "loopback-test"])
    assert shown.exit_code == 0, shown.output
    assert "not downloaded" in shown.output and "architecture: fixture" in shown.output
    assert "spacy-elmo download loopback-test" in shown.output
    assert sum(server.hits.values()) == 0 and not home.exists()
    load_bilm("loopback-test")  # once the files are cached, info describes them (still no download)
    hits = sum(server.hits.values())
    cached = CliRunner().invoke(app, ["info", "loopback-test"])
    assert cached.exit_code == 0 and "parameters:" in cached.output and "not downloaded" not in cached.output
    assert sum(server.hits.values()) == hits


# -- a copied cache, a read-only cache ---------------------------------------------------------


def _filled_cache(monkeypatch, server, fixture_dir, tmp_path):
    """The cache (SPACY_ELMO_HOME) holding, as `spacy-elmo download` and a first load leave them, a published model of
    two files, a published model of one archive, an archive by URL and a local archive: the models to load."""
    from spacy_elmo.cli import app

    server.files["nlpl/elmo.zip"] = _nlpl_archive(fixture_dir, tmp_path / "nlpl.zip").read_bytes()
    server.files["any/elmo.tar.gz"] = _nlpl_archive(fixture_dir, tmp_path / "any.tar.gz").read_bytes()
    _publish(monkeypatch, server)
    publish_test_model(monkeypatch, "loopback-archive", archive_url=server.url("nlpl/elmo.zip"))
    models = ["loopback-test", "loopback-archive", server.url("any/elmo.tar.gz")]
    fetched = CliRunner().invoke(app, ["download", *models])
    assert fetched.exit_code == 0, fetched.output
    (tmp_path / "local").mkdir()
    # the published zip's bytes (made again, a zip's entries would hold another time when a second boundary passed)
    local = shutil.copy(tmp_path / "nlpl.zip", tmp_path / "local" / "elmo.zip")
    load_bilm(local)
    return [*models, str(local)]


def _unpacked_folders(home):
    return sorted(p.name for p in (home / "archives").iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("flag", ["-a", "-r"])
def test_the_documented_offline_copy_of_the_cache_unpacks_nothing_again(
    home, server, monkeypatch, fixture_dir, tmp_path, backend, flag
):
    """docs/models.md: fetch on a machine with a network, copy the cache folder, use the copy offline. The copy
    unpacked every downloaded archive again (an unpacked archive's key held the archive's absolute path and mtime)."""
    from tests.conftest import files_under, writes_between

    cp = shutil.which("cp")
    if cp is None:
        pytest.skip("no cp command on this machine")
    models = _filled_cache(monkeypatch, server, fixture_dir, tmp_path)
    hits = sum(server.hits.values())
    copy = tmp_path / "elsewhere" / "elmo-cache"
    copy.parent.mkdir()
    subprocess.run([cp, flag, str(home), str(copy)], check=True)
    monkeypatch.setenv("SPACY_ELMO_HOME", str(copy))
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    before = files_under(copy)
    for model in models:
        assert load_bilm(model).fingerprint == backend.fingerprint, model
    assert writes_between(before, files_under(copy)) == []  # nothing unpacked again, not even a lock
    assert sum(server.hits.values()) == hits and len(_unpacked_folders(copy)) == 2  # two archives' contents


def _assert_says_what_to_do(message, home, doing):
    assert "\n" not in message and len(message) < 400, message
    assert f"cannot write in {home}" in message and doing in message, message
    assert message.endswith("set SPACY_ELMO_HOME to a writable folder (a copy of this cache keeps what it holds)")


def test_a_read_only_cache_loads_what_it_holds_and_says_what_to_do_for_the_rest(
    home, server, monkeypatch, fixture_dir, tmp_path, backend, read_only
):
    """A read-only cache (chmod -R a-w, a read-only mount) raised a raw PermissionError / OSError (on a lock, a
    folder) wherever it had to be written; now what it holds loads with no write, and the rest is one line."""
    from spacy_elmo.cli import app

    models = _filled_cache(monkeypatch, server, fixture_dir, tmp_path)
    read_only.add(home)
    for model in models:
        assert load_bilm(model).fingerprint == backend.fingerprint, model
    assert read_only.attempts == []
    server.files["other.zip"] = (tmp_path / "nlpl.zip").read_bytes()
    other = shutil.copy(tmp_path / "nlpl.zip", tmp_path / "other.zip")
    with open(other, "ab") as handle:
        handle.write(b"\0")  # other bytes: another archive to unpack (zip readers allow trailing bytes)
    for model, doing in ((server.url("other.zip"), "to download"), (other, f"to unpack {other}")):
        with pytest.raises(DownloadError) as err:
            load_bilm(model)
        _assert_says_what_to_do(str(err.value), home, doing)
    forced = CliRunner().invoke(app, ["download", "--force", "loopback-test"])
    assert forced.exit_code == 2 and "Traceback" not in forced.output
    _assert_says_what_to_do(forced.output.strip().removeprefix("error: "), home, "to remove what it holds of")
    assert load_bilm("loopback-test").fingerprint == backend.fingerprint and server.hits["other.zip"] == 0


_READ_ONLY_LOADS = """
import sys
from spacy_elmo import load_bilm
from spacy_elmo.sources.download import DownloadError
for model in sys.argv[2:]:  # "OPTIONS_URL WEIGHTS_URL": a model of two files
    options, _, weights = model.partition(" ")
    print((load_bilm(options=options, weights=weights) if weights else load_bilm(model)).fingerprint)
try:
    load_bilm(sys.argv[1])
except DownloadError as err:
    print(f"DownloadError: {err}")
"""


@pytest.mark.slow
def test_a_read_only_cache_in_another_process(home, server, monkeypatch, fixture_dir, tmp_path, backend):
    """The same with a folder the system makes read-only: ``chmod -R a-w`` for a user who is not root, a read-only
    bind mount in a mount namespace of its own for root (who ignores permission bits); skipped where neither can be
    made."""
    models = _filled_cache(monkeypatch, server, fixture_dir, tmp_path)
    published = {  # the table the subprocess sees has not the test's models: their URLs
        "loopback-test": f"{server.url('m/options.json')} {server.url('m/weights.hdf5')}",
        "loopback-archive": server.url("nlpl/elmo.zip"),
    }
    models = [published.get(model, model) for model in models]
    other = tmp_path / "other.tar.gz"
    other.write_bytes(server.files["any/elmo.tar.gz"] + b"\0" * 1024)  # another archive, not unpacked yet
    command = [sys.executable, "-c", _READ_ONLY_LOADS, str(other), *models]
    if not hasattr(os, "geteuid"):
        pytest.skip("no POSIX user ids here")
    elif os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(home)], check=True)
    else:
        unshare = shutil.which("unshare")
        remount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
        probe = [unshare or "unshare", "-m", "sh", "-c", remount, str(home), "true"]
        if unshare is None or subprocess.run(probe, capture_output=True).returncode != 0:
            pytest.skip("run as root, where chmod cannot make a folder read-only, and no read-only mount can be made")
        command = [unshare, "-m", "sh", "-c", remount, str(home), *command]
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(home)], check=True)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[:-1] == [backend.fingerprint] * len(models), done.stdout + done.stderr[-3000:]
    assert lines[-1].startswith("DownloadError: cannot write in ") and "SPACY_ELMO_HOME" in lines[-1], lines[-1]
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before
