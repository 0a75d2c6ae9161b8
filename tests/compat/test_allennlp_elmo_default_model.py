"""`spacy-elmo allennlp-elmo` without --options-file/--weight-file needs AllenNLP's default model (the published
`original`); where it is neither cached nor downloadable, one complete line says so and names the ways out."""

import socket

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app

WAYS_OUT = ("--options-file FILE --weight-file FILE", "spacy-elmo download original", "SPACY_ELMO_OFFLINE=1")


def closed_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released): connecting to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(tmp_path, *options, **env):
    (tmp_path / "in.txt").write_text("hello world\n", encoding="utf-8")
    args = ["allennlp-elmo", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--all", *options]
    result = CliRunner().invoke(app, args, env={"SPACY_ELMO_HOME": str(tmp_path / "home"), **env})
    assert result.exit_code == 2, result.output
    assert not (tmp_path / "out.hdf5").exists()
    return result.output.strip()


@pytest.mark.parametrize("where", ["offline", "no network"])
def test_the_default_model_unreachable_is_one_complete_line_naming_the_ways_out(tmp_path, where):
    if where == "offline":
        env = {"SPACY_ELMO_OFFLINE": "1"}
    else:  # every HTTPS request goes to a proxy that refuses the connection: no network, quickly, without leaving
        proxy = f"http://127.0.0.1:{closed_loopback_port()}"
        env = {"SPACY_ELMO_OFFLINE": None, "HTTPS_PROXY": proxy, "https_proxy": proxy, "NO_PROXY": None}
        env["no_proxy"] = None
    output = run(tmp_path, **env)
    assert output.startswith("error: the default model (AllenNLP's 'original'") and "\n" not in output, output
    assert "..." not in output and output.endswith("(same SPACY_ELMO_HOME)"), output  # nothing clipped
    for way_out in WAYS_OUT:
        assert way_out in output, (way_out, output)
    assert ("could not connect" in output) == (where == "no network"), output


def test_a_model_given_by_the_user_keeps_the_fetchers_own_message(tmp_path):
    port = closed_loopback_port()
    options = ["--options-file", f"http://127.0.0.1:{port}/options.json"]
    output = run(tmp_path, *options, "--weight-file", f"http://127.0.0.1:{port}/weights.hdf5", SPACY_ELMO_OFFLINE="1")
    assert "default model" not in output and f"127.0.0.1:{port}/options.json" in output, output
