"""Published models, URLs and archives, against a loopback HTTP server this test starts (no real network)."""
import io
import json
import shutil
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

import spacy_elmo.published
from spacy_elmo import ElmoVectorizer, load_bilm
from spacy_elmo.download import DownloadError
from spacy_elmo.published import PublishedModel

from numerics import assert_recomputed_close


class LoopbackServer:
    """Serves ``files`` (path -> bytes) on 127.0.0.1; counts GETs; can cut transfers off or refuse ranges."""

    def __init__(self, files, ranges=True, delay=0.0):
        self.files = dict(files)
        self.hits = Counter()
        self.range_requests = Counter()
        self.cut_next = Counter()  # path -> how many of the next GETs stop half way
        self.ranges = ranges
        self.delay = delay
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

    def _serve(self, handler, body):
        path = handler.path.lstrip("/")
        data = self.files.get(path)
        if data is None:
            handler.send_error(404, "Not Found")
            return
        start = 0
        wanted = handler.headers.get("Range") if self.ranges else None
        if body:
            self.hits[path] += 1
        if wanted and wanted.startswith("bytes="):
            start = int(wanted[len("bytes="):].split("-")[0])
            self.range_requests[path] += body
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            handler.send_response(200)
        handler.send_header("Content-Length", str(len(data) - start))
        if self.ranges:
            handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        if not body:
            return
        payload = data[start:]
        if self.cut_next[path] > 0:
            self.cut_next[path] -= 1
            handler.wfile.write(payload[: len(payload) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(2)  # the client sees the connection close mid-body
            return
        for i in range(0, len(payload), 65536):
            if self.delay:
                time.sleep(self.delay)
            handler.wfile.write(payload[i : i + 65536])


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


def _publish(monkeypatch, server, name="loopback-test", **kw):
    entry = PublishedModel(
        name=name, options_url=server.url("m/options.json"), weights_url=server.url("m/weights.hdf5"),
        architecture="fixture", parameters_m=0.1, approx_mb=1, trained_on="test", source="test", **kw,
    )
    monkeypatch.setitem(spacy_elmo.published.PUBLISHED, name, entry)
    return entry


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


def test_wrong_sha256_is_refused(home, server, monkeypatch):
    _publish(monkeypatch, server, weights_sha256="0" * 64)
    with pytest.raises(DownloadError, match="sha256 .* but 0{64} is expected; refused"):
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


def test_two_processes_loading_one_url_download_it_once(home, model_bytes):
    srv = LoopbackServer(model_bytes, delay=0.05)  # slow enough that the two downloads would overlap
    try:
        args = [srv.url("m/options.json"), srv.url("m/weights.hdf5")]
        procs = [
            subprocess.Popen([sys.executable, "-c", _CONCURRENT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
        assert saved == {"source": "remote", "model": url, "fingerprint": backend.fingerprint}  # a reference, not a copy
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


def test_cli_download_and_models(home, server, monkeypatch):
    from spacy_elmo.cli import app

    _publish(monkeypatch, server)
    runner = CliRunner()
    listed = runner.invoke(app, ["models"])
    assert listed.exit_code == 0 and "original-5.5B" in listed.output
    assert [line for line in listed.output.splitlines() if line.startswith("loopback-test")][0].endswith("no")
    fetched = runner.invoke(app, ["download", "loopback-test"])
    assert fetched.exit_code == 0, fetched.output
    assert [line for line in runner.invoke(app, ["models"]).output.splitlines() if line.startswith("loopback-test")][0].endswith("yes")
    missing = runner.invoke(app, ["download", server.url("nope.hdf5")])
    assert missing.exit_code == 2 and "404" in missing.output and "Traceback" not in missing.output
    monkeypatch.setenv("SPACY_ELMO_OFFLINE", "1")
    offline = runner.invoke(app, ["embed", "-", str(home / "x.hdf5"), "--model", "original"], input="a b\n")
    assert offline.exit_code == 2 and "offline mode is on" in offline.output


def test_published_table_names_the_allennlp_models():
    from spacy_elmo.published import PUBLISHED, published_by_url

    for name in ("small", "medium", "original", "original-5.5B", "pubmed"):
        entry = PUBLISHED[name]
        assert entry.options_url.startswith("https://") and entry.weights_url.endswith(".hdf5")
    url = "https://allennlp.s3.amazonaws.com/models/elmo/2x4096_512_2048cnn_2xhighway/elmo_2x4096_512_2048cnn_2xhighway_options.json"
    assert published_by_url(url).name == "original"  # AllenNLP's own default URL spelling


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
