"""benchmarks/bench_latency.py's parts: where to get WikiText-2 when it is missing, and the report's table."""

from pathlib import Path

import pytest

from tests.conftest import imported_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_latency.py"


@pytest.fixture(scope="module")
def bench():
    with imported_script(SCRIPT) as module:
        yield module


def test_missing_wikitext_says_where_to_get_it(bench, tmp_path, capsys):
    assert bench.main(["--text", str(tmp_path / "test.txt")]) == 2
    message = capsys.readouterr().err
    assert str(tmp_path / "test.txt") in message and "wikitext-2/README.md" in message


def test_the_sentences_are_wikitexts_in_corpus_order(bench, tmp_path):
    text = tmp_path / "test.txt"
    text.write_text(" = Heading = \n The cat sat . A dog ran far . \n \n Birds fly . \n", encoding="utf-8")
    got = bench.sentences(text, 2)  # headings skipped, paragraphs split at " . " (bench.py's reader)
    assert len(got) == 2 and got[0] == ["The", "cat", "sat", "."] and got[1][:4] == ["A", "dog", "ran", "far"]


def test_the_table_has_a_row_per_configuration_and_a_column_per_condition(bench):
    results = {c: {name: [100.0, 300.0, 200.0] for name in bench.CONFIGS} for c in bench.CONDITIONS}
    lines = bench.table(results).splitlines()
    assert len(lines) == 2 + len(bench.CONFIGS)
    assert lines[2] == "| 1 thread | 200 (100-300) | 200 (100-300) |"
