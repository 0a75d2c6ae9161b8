"""Every spelling of a precision that ``dtype=`` takes is documented: docs/precision.md's table of names and the
``--dtype`` help both list each precision of the table with its aliases, so a new alias cannot go undocumented."""

import re
from pathlib import Path

from spacy_elmo.bilm.engine.precisions import ALIASES, AUTO, PRECISIONS, dtype_help
from spacy_elmo.runtime.configuration.validation import check_dtype

PAGE = Path(__file__).resolve().parents[2] / "docs" / "precision.md"


def documented_names() -> dict[str, tuple[str, ...]]:
    """docs/precision.md's table of names: each dtype's name -> the other spellings its row lists."""
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("| dtype | also spelled |") :].split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines()[2:]:
        name_cell, also_cell = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows[re.findall(r'`"([^"]+)"`', name_cell)[0]] = tuple(re.findall(r'`"([^"]+)"`', also_cell))
    return rows


def test_the_page_lists_every_precision_and_alias_of_the_table():
    assert documented_names() == {**{p.name: p.aliases for p in PRECISIONS}, AUTO: ()}


def test_the_dtype_help_lists_every_alias():
    helped = dtype_help()
    for p in PRECISIONS:
        listed = re.search(rf"\b{p.name} \(([^)]*)\)", helped)
        assert listed, (p.name, helped)
        assert listed[1].endswith(f"also {', '.join(p.aliases)}") if p.aliases else "also" not in listed[1]


def test_each_documented_spelling_names_its_precision():
    for name, also in documented_names().items():
        assert {check_dtype(spelling) for spelling in (name, *also)} == {name}
    assert set(ALIASES) == {alias for also in documented_names().values() for alias in also}
