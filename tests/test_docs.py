"""The documents keep their form: lines of at most 100 columns (tables and code aside), a short
FPGA document, and references to sections that exist."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WIDTH = 100


def _prose(path):
    """``[(number, line)]`` of the lines of ``path`` outside tables and fenced code."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("|"):
            lines.append((number, line))
    return lines


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: path.name)
def test_prose_lines_are_at_most_100_columns(path):
    wide = [f"{path.name}:{number} ({len(line)})" for number, line in _prose(path)
            if len(line) > WIDTH]
    assert wide == []


def test_the_fpga_document_is_short_and_narrow():
    lines = (ROOT / "docs" / "fpga.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300
    assert max(len(line) for line in lines) <= WIDTH


def _sections(path):
    """The headings and the bold leads of paragraphs and list items of ``path``."""
    text = path.read_text(encoding="utf-8")
    return (set(re.findall(r"^#+ (.+)$", text, re.MULTILINE))
            | set(re.findall(r"^(?:- )?\*\*(.+?)\.?\*\*", text, re.MULTILINE)))


def _references():
    """``(file, document, section)`` for every ``docs/<name>.md``, "<section>" in the
    documents and the code."""
    files = DOCUMENTS + sorted(path for folder in ("golden", "host", "experiments", "hw", "gen",
                                                   "sim", "fpga")
                               for path in (ROOT / folder).glob("*.py"))
    found = []
    for path in files:
        text = re.sub(r"\s*\n\s*(?:#:?)?\s*", " ", path.read_text(encoding="utf-8"))
        for match in re.finditer(r"`*(docs/\w+\.md)`*,\s*\"([^\"]+)\"", text):
            found.append((path.name, match.group(1), match.group(2)))
    return found


def test_references_to_sections_name_sections_that_exist():
    references = _references()
    assert any(document == "docs/fpga.md" for _, document, _ in references)
    missing = [f"{name}: {document}, {section!r}" for name, document, section in references
               if not any(heading.startswith(section) for heading in _sections(ROOT / document))]
    assert missing == []
