"""The text layouts: Project Gutenberg's licence text, WikiExtractor's markup and JSON lines never reach training."""

from pathlib import Path

import pytest

from spacy_elmo.train.corpus.layouts import LAYOUTS, gutenberg_body, layout_files, text_blocks

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "corpus_layouts"


def test_gutenberg_keeps_the_book_between_its_markers():
    book = SAMPLES / "gutenberg" / "alcott-a-garland-for-girls.txt"
    blocks = list(text_blocks(book, "gutenberg"))
    text = "\n".join(blocks)
    raw = book.read_text(encoding="utf-8")
    assert "This eBook is for the use of anyone" in raw and "This eBook is for the use of anyone" not in text
    assert "should be named 5830-0.txt" in raw and "5830-0.txt" not in text  # the footer, after the END marker
    assert "START OF THIS PROJECT" not in text and "END OF THIS PROJECT" not in text
    assert "End of Project Gutenberg's A Garland for Girls" in raw and "End of Project" not in text
    assert "PREFACE" in blocks
    # hard-wrapped lines are joined into one paragraph
    assert any(
        b.startswith("These stories were written for my own amusement during a period of enforced") for b in blocks
    )


def test_gutenberg_start_marker_that_wraps_and_a_file_without_markers():
    wrapped = [
        "header\n",
        "***START OF THE PROJECT GUTENBERG EBOOK THE GREAT ENGLISH SHORT-STORY\n",
        "COLLECTION, VOL. I***\n",
        "Body line.\n",
        "***END OF THE PROJECT GUTENBERG EBOOK THE GREAT ENGLISH SHORT-STORY\n",
        "licence\n",
    ]
    assert list(gutenberg_body(wrapped)) == ["Body line.\n"]
    older = [
        "**Welcome To The World of Free Plain Vanilla Electronic Texts**\n",
        "***START**THE SMALL PRINT!**FOR PUBLIC DOMAIN ETEXTS**START***\n",
        "the small print\n",
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n",
        "Chapter I.\n",
        "End of the Project Gutenberg Etext of X\n",
        "after\n",
    ]
    assert list(gutenberg_body(older)) == ["Chapter I.\n"]
    plain = ["Just a text.\n", "\n", "No markers at all.\n"]
    assert list(gutenberg_body(plain)) == plain  # nothing is dropped for want of a header


def test_wikiextractor_drops_doc_lines_and_titles_and_unescapes_entities(tmp_path):
    sample = list(text_blocks(SAMPLES / "wikiextractor" / "AA" / "wiki_00", "wikiextractor"))
    assert sample[0].startswith("Anarchism is a political philosophy")
    assert not any(b.startswith("<doc") or b == "</doc>" or b in ("Anarchism", "Dungeons & Dragons") for b in sample)
    path = tmp_path / "wiki_00"
    path.write_text(
        '<doc id="1" url="u" title="A &amp; B">\nA &amp; B\n\nFirst &quot;quoted&quot; paragraph.\n'
        "Second &lt;line&gt; &amp; more.\n</doc>\n",
        encoding="utf-8",
    )
    assert list(text_blocks(path, "wikiextractor")) == ['First "quoted" paragraph.', "Second <line> & more."]


def test_jsonl_reads_the_text_field_and_names_a_bad_line(tmp_path):
    sample = list(text_blocks(SAMPLES / "jsonl" / "AA" / "wiki_00", "jsonl"))
    assert sample[0].startswith("April is the fourth month of the year")
    assert not any('"id"' in b or "simple.wikipedia.org" in b for b in sample)
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "One.\\nTwo \\ud800."}\n\n{"title": "no text"}\n', encoding="utf-8")
    blocks = text_blocks(path, "jsonl")
    assert next(blocks) == "One."
    assert next(blocks) == "Two \ufffd."  # a lone surrogate cannot be written as UTF-8: replaced
    with pytest.raises(ValueError, match=r"a\.jsonl:3 has no 'text' string"):
        next(blocks)


def test_a_directory_stands_for_its_layouts_files(tmp_path):
    (tmp_path / "AA").mkdir()
    for name in ("AA/wiki_00", "AA/wiki_01", "notes.txt", "source-info.json", ".hidden/wiki_02"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x\n")
    assert [p.name for p in layout_files(tmp_path, "wikiextractor")] == ["wiki_00", "wiki_01"]
    assert [p.name for p in layout_files(tmp_path, "lines")] == ["notes.txt"]
    with pytest.raises(FileNotFoundError, match="not found"):
        layout_files(tmp_path / "missing", "jsonl")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"has no \*\.jsonl or \*\.json or wiki_\* files"):
        layout_files(tmp_path / "empty", "jsonl")
    with pytest.raises(ValueError, match="unknown text layout 'xml'"):
        layout_files(tmp_path, "xml")
    assert set(LAYOUTS) == {"lines", "raw", "gutenberg", "wikiextractor", "jsonl"}


def _long_text(n_words: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return ["".join(rng.choices("abcdefgh", k=rng.randint(1, 9))) for _ in range(n_words)]


@pytest.mark.parametrize("layout", ["lines", "raw", "wikiextractor", "gutenberg", "jsonl"])
def test_blocks_never_exceed_the_limit_and_keep_every_token(tmp_path, monkeypatch, layout):
    """A line (or paragraph) of any length was read whole: a 2 GiB line without a newline ended in a MemoryError.
    Now no block is longer than the limit, and the blocks hold the text's tokens in order, none lost or split
    (the cuts fall after spaces)."""
    import json

    from spacy_elmo.train.corpus import layouts

    monkeypatch.setattr(layouts, "MAX_BLOCK_CHARS", 60)
    words = _long_text(400)
    one_line = " ".join(words)  # about 2,000 characters, no newline at its end
    wrapped = "\n".join(" ".join(words[i : i + 3]) for i in range(0, len(words), 3))  # one paragraph of short lines
    text = {
        "lines": one_line,
        "raw": wrapped,
        "wikiextractor": f'<doc id="1">\nTitle\n{one_line}\n</doc>\n',
        "gutenberg": wrapped,
        "jsonl": json.dumps({"text": one_line}) + "\n",
    }[layout]
    path = tmp_path / "text"
    path.write_text(text, encoding="utf-8")
    blocks = list(text_blocks(path, layout))
    assert len(blocks) >= len(one_line) // 60
    assert max(len(b) for b in blocks) <= 60
    assert " ".join(blocks).split() == words


def test_a_line_without_spaces_is_cut_at_the_limit(tmp_path, monkeypatch):
    from spacy_elmo.train.corpus import layouts

    monkeypatch.setattr(layouts, "MAX_BLOCK_CHARS", 64)
    path = tmp_path / "dump.txt"
    path.write_text("x" * 1000 + "\nlast line\n", encoding="utf-8")
    blocks = list(text_blocks(path, "lines"))
    assert [len(b) for b in blocks[:-1]] == [64] * 15 + [40 + 1]  # 1000 = 15 x 64 + 40, then its newline
    assert blocks[-1] == "last line\n" and "".join(blocks[:-1]) == "x" * 1000 + "\n"


def test_a_json_line_over_the_limit_is_refused_by_file_line_and_limit(tmp_path, monkeypatch):
    from spacy_elmo.train.corpus import layouts

    monkeypatch.setattr(layouts, "MAX_JSON_LINE_CHARS", 100)
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "short"}\n' + '{"text": "' + "y " * 60 + '"}\n', encoding="utf-8")
    blocks = text_blocks(path, "jsonl")
    assert next(blocks) == "short"
    with pytest.raises(ValueError, match=r"a\.jsonl:2 is a JSON line longer than 100 characters, the most read whole"):
        next(blocks)
