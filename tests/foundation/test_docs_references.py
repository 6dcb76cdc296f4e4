"""Every ``docs/<file>.md §<section>`` reference in the code names a section that exists.

Docstrings cite the section of ``docs/`` that derives what a function implements; a
reference to a section that was renamed or never written sends a reader nowhere. A
reference is a docs file (``docs/`` + name + ``.md``) followed by ``§N`` / ``§N.M`` (a numbered heading
``N.`` / ``N.M``) or ``§Word`` (a heading whose text, after its number, starts with Word),
and chained ones: ``§1-§3``, ``§7.1, §7.6``, ``§2 and §3``.

The docs stand alone: no page of ``docs/`` (nor the README) cites the design notes or
papers kept beside the checkout (``../shared/design/*.md``, ``shared/papers``,
``design/NAME.md``), which a clone does not have.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounting", "planner", "app", "trainer", "bench", "tests")

REFERENCE = re.compile(r"docs/(?P<file>[\w.-]+\.md)(?P<sections>(?:\s*(?:,|-|and|or)?\s*§\s?[\w.]*\w)*)")
SECTION = re.compile(r"§\s?([\w.]*\w)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*$", re.MULTILINE)
NUMBER = re.compile(r"^(?P<number>\d+(?:\.\d+)*)\.?\s+(?P<rest>.*)$")


def _references() -> list[tuple[str, str, str]]:
    """(source location, docs file, section or '') for every reference in the code."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            # Docstrings and comments wrap lines: fold a line break and the comment marker.
            folded = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
            for match in REFERENCE.finditer(folded):
                where = f"{path.relative_to(ROOT)}"
                sections = SECTION.findall(match.group("sections"))
                if not sections:
                    found.append((where, match.group("file"), ""))
                found.extend((where, match.group("file"), section) for section in sections)
    return found


def _headings(docs_file: Path) -> tuple[set[str], list[str]]:
    """Numbers of numbered headings, and the text (after any number) of every heading."""
    numbers, texts = set(), []
    for heading in HEADING.finditer(docs_file.read_text(encoding="utf-8")):
        text = heading.group("text")
        numbered = NUMBER.match(text)
        if numbered:
            numbers.add(numbered.group("number"))
            text = numbered.group("rest")
        texts.append(text.strip("`").lower())
    return numbers, texts


def _resolves(section: str, numbers: set[str], texts: list[str]) -> bool:
    if re.fullmatch(r"\d+(?:\.\d+)*", section):
        return section in numbers
    word = section.lower()
    return any(re.match(rf"`?{re.escape(word)}\b", text) for text in texts)


REFERENCES = _references()


def test_the_code_cites_docs() -> None:
    # Guards the scanner itself: the code base cites its docs in hundreds of places.
    assert len(REFERENCES) > 100


@pytest.mark.parametrize(("docs_file", "section"), sorted({(f, s) for _, f, s in REFERENCES}))
def test_reference_resolves(docs_file: str, section: str) -> None:
    where = sorted({w for w, f, s in REFERENCES if (f, s) == (docs_file, section)})
    path = ROOT / "docs" / docs_file
    assert path.is_file(), f"docs/{docs_file} does not exist (cited in {', '.join(where)})"
    if section:
        numbers, texts = _headings(path)
        assert _resolves(section, numbers, texts), (
            f"docs/{docs_file} has no section §{section} (cited in {', '.join(where)})"
        )


def test_scanner_finds_chained_and_wrapped_references() -> None:
    sample = "see docs/ledger.md §1-§3 and docs/accounting.md §7.1 (rdp),\n    # §7.6; docs/trainer.md §Runs."
    folded = re.sub(r"\s*\n\s*(?:#\s*)?", " ", sample)
    got = [(m.group("file"), SECTION.findall(m.group("sections"))) for m in REFERENCE.finditer(folded)]
    assert got == [("ledger.md", ["1", "3"]), ("accounting.md", ["7.1"]), ("trainer.md", ["Runs"])]


def test_resolution_rules() -> None:
    numbers, texts = {"4", "4.2"}, ["threat notes", "runs, checkpoints and resume"]
    assert _resolves("4.2", numbers, texts)
    assert not _resolves("4.3", numbers, texts)
    assert _resolves("Threat", numbers, texts)
    assert _resolves("Runs", numbers, texts)
    assert not _resolves("Aggregation", numbers, texts)


# A citation of material a clone does not have: the design notes and papers kept beside
# the checkout, however the path is spelled (../shared/..., shared/design/..., design/NAME.md).
OUTSIDE = re.compile(r"(?:\.\./shared\b|\bshared/(?:design|papers)\b|(?<![\w/.-])design/[\w.-]+\.md)")


def _outside_citations(text: str) -> list[str]:
    return [match.group(0) for match in OUTSIDE.finditer(text)]


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_docs_cite_nothing_outside_the_repository(page: str) -> None:
    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines()
    cited = [f"docs/{page}:{n}: {line.strip()}" for n, line in enumerate(lines, 1) if _outside_citations(line)]
    assert not cited, "docs must stand alone; a clone has no ../shared:\n" + "\n".join(cited)


def test_readme_cites_no_design_note_or_paper() -> None:
    # The README may say where the optional Shakespeare test text is read from (a data
    # path, not a citation); it cites no design note or paper.
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not [c for c in _outside_citations(text) if c != "../shared"], _outside_citations(text)
    assert "shared/design" not in text and "shared/papers" not in text


def test_outside_citations_are_found_however_spelled() -> None:
    found = _outside_citations("(design: `../shared/design/trainer.md`) and `shared/design/mrmtl.md`, "
                               "`design/metric-privacy.md`; not " + "docs/" + "design.md or trainer/design/x.md")
    assert found == ["../shared", "shared/design", "design/metric-privacy.md"]


def test_code_cites_docs_not_the_design_notes() -> None:
    """Docstrings cite docs/ sections; a design note beside the checkout is not in a clone."""
    cited = []
    for package in ("accounting", "planner", "app", "trainer", "bench"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"shared/(?:design|papers)\b", line):
                    cited.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not cited, "\n".join(cited)
