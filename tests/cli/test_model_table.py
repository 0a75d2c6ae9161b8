"""``spacy-elmo models``: every model a name gives (the bundled default too) in a table a terminal shows whole;
``spacy-elmo info NAME`` of a contributed model says who published it in words."""

import re

from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.cli.model_table import WIDTH, model_lines
from spacy_elmo.sources.published import PUBLISHED


def test_models_lists_default_and_every_published_name_within_100_columns(tmp_path):
    result = CliRunner().invoke(app, ["models"], env={"SPACY_ELMO_HOME": str(tmp_path / "h")})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    table = [line for line in lines if not line.startswith("spacy-elmo info NAME")]  # that one names the cache path
    too_wide = [line for line in table if len(line) > 100]
    assert not too_wide, too_wide
    assert len(lines) < 60  # 53 models: the 44 that differ only in language are packed, not one row each
    words = set(re.findall(r"\S+", result.output))
    assert "default" in words and "bundled" in words
    for name in PUBLISHED:
        assert name in words, name
    default = next(line for line in lines if line.startswith("default "))
    assert re.search(r"\b3\.0M\b", default) and re.search(r"\b12 MB\b", default)  # the bundled model's own files
    assert "contributed:" not in result.output


def test_the_cached_column_asks_the_cache_for_every_file_of_a_model():
    small = set(PUBLISHED["small"].urls) | set(PUBLISHED["manylangs-fi"].urls)
    lines = model_lines(lambda url: url in small)
    assert all(len(line) <= WIDTH for line in lines)
    row = {line.split()[0]: line for line in lines if line[:1].strip()}
    assert re.match(r"small\s+English\s+13\.6M\s+~55 MB\s+yes\s", row["small"])
    assert re.match(r"medium\s.*\sno\s", row["medium"])
    assert re.search(r"manylangs-fi\s+Finnish\s+yes\b", "\n".join(lines))
    assert re.search(r"manylangs-fr\s+French\s+no\b", "\n".join(lines))
    narrow = model_lines(lambda url: False, width=80)
    assert all(len(line) <= 80 for line in narrow)


def test_info_of_a_contributed_model_names_its_publisher_in_words():
    result = CliRunner().invoke(app, ["info", "ja"])
    assert result.exit_code == 0, result.output
    assert "published by ExaWizards, contributed to AllenNLP's list; not downloaded" in result.output
    assert "by contributed" not in result.output
    assert "published by AllenNLP;" in CliRunner().invoke(app, ["info", "small"]).output
