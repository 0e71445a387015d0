"""The documentation's links hold: every relative link names a file that exists and every #anchor a heading of that
file (GitHub's slugs); every page under docs/ is reachable from docs/index.md; the README stays a short guide whose
first screen names the two commands, every mode's page and the day-2 pages; no table is split by a second header;
no page but the changelog tells the story of the work."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 300

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+).*?\1")
# [text](target) and ![alt](target); the target ends at whitespace (an optional "title" follows) or the parenthesis.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def pages() -> list[Path]:
    found = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "BENCHMARKS.md"]
    found += sorted((REPO / "docs").rglob("*.md"))
    found += sorted(REPO.glob("roles/*/README.md")) + sorted(REPO.glob("charts/*/README.md"))
    found += [REPO / "scripts" / "README.md", REPO / "scripts" / "gpu_e2e" / "README.md", REPO / "tests" / "README.md",
              REPO / "tests" / "bench" / "results" / "results.md"]
    return [p for p in found if p.is_file()]


def prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, INLINE_CODE.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links and emphasis reduced to their text, backticks dropped, lowercase, every
    character but letters, digits, underscores, hyphens and spaces removed, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text()
    seen: dict[str, int] = {}
    result = set(HTML_ANCHOR.findall(text))
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
    return result


def links_in(text: str):
    """(line number, target) of every relative link in a page's text."""
    for number, line in prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
                continue
            yield number, target


def links(path: Path):
    return links_in(path.read_text())


def broken(path: Path, root: Path = REPO) -> list[str]:
    problems = []
    for number, target in links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with that anchor in {dest.relative_to(root)}")
    return problems


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path):
    assert broken(path) == []


def test_every_docs_page_is_linked_from_the_index():
    index = REPO / "docs" / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in links(index) if t.partition("#")[0]}
    orphans = [str(p.relative_to(REPO)) for p in sorted((REPO / "docs").rglob("*.md"))
               if p != index and p.resolve() not in linked]
    assert orphans == [], "link these from docs/index.md"


def test_readme_is_a_short_guide_pointing_at_the_index():
    readme = REPO / "README.md"
    assert len(readme.read_text().splitlines()) <= README_MAX_LINES
    assert "docs/index.md" in [t.partition("#")[0] for _, t in links(readme)]


def test_the_checker_finds_a_broken_link_and_a_broken_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title `code`: here\n\n[ok](#title-code-here) [bad](b.md) [x](a.md#nowhere)\n"
                                   "```\n[in code](missing.md)\n```\n")
    assert broken(tmp_path / "a.md", tmp_path) == ["a.md:3: b.md: no such file",
                                         "a.md:3: a.md#nowhere: no heading with that anchor in a.md"]


# What a reader sees without scrolling: the README's first screen names the two commands, every mode's page and
# where each day-2 operation is described.
FIRST_SCREEN = 45
TABLE_SEPARATOR = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$")


def first_screen_problems(readme: Path, root: Path = REPO) -> list[str]:
    lines = readme.read_text().splitlines()[:FIRST_SCREEN]
    shown = "\n".join(lines)
    targets = {(readme.parent / t.partition("#")[0]).resolve() for _, t in links_in("\n".join(lines)) if t}
    wanted = sorted((root / "docs" / "modes").glob("*.md")) + [root / "docs" / page for page in ("day2.md",
                                                                                                 "operations.md")]
    problems = [f"no link to {p.relative_to(root)} in the first {FIRST_SCREEN} lines" for p in wanted
                if p.resolve() not in targets]
    problems += [f"no `{cmd}` in the first {FIRST_SCREEN} lines" for cmd in ("make demo", "make test")
                 if cmd not in shown]
    return problems


def split_tables(path: Path) -> list[str]:
    """Tables with a second header separator row: a header written twice renders as a row of header text and a
    row of dashes."""
    problems, separators, start = [], 0, 0
    for number, line in prose_lines(path.read_text() + "\n"):
        if line.lstrip().startswith("|"):
            if not separators and not start:
                start = number
            if TABLE_SEPARATOR.match(line):
                separators += 1
                if separators == 2:
                    problems.append(f"{path.name}:{number}: a second header separator in the table of line {start}")
        else:
            separators, start = 0, 0
    return problems


def test_readme_first_screen_names_the_commands_each_mode_and_day2():
    assert first_screen_problems(REPO / "README.md") == []


@pytest.mark.parametrize("path", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_table_has_one_header(path):
    assert split_tables(path) == []


def test_the_checks_find_a_missing_mode_link_and_a_doubled_header(tmp_path):
    (tmp_path / "docs" / "modes").mkdir(parents=True)
    for name in ("docs/modes/a.md", "docs/modes/b.md", "docs/day2.md", "docs/operations.md"):
        (tmp_path / name).write_text("# x\n")
    readme = tmp_path / "README.md"
    readme.write_text("make demo\nmake test\n[a](docs/modes/a.md) [d](docs/day2.md) [o](docs/operations.md#x)\n"
                      + "\n" * FIRST_SCREEN + "[b](docs/modes/b.md)\n")
    assert first_screen_problems(readme, tmp_path) == [f"no link to docs/modes/b.md in the first {FIRST_SCREEN} lines"]
    page = tmp_path / "t.md"
    page.write_text("| a | b |\n|---|---|\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| c |\n|---|\n")
    assert split_tables(page) == ["t.md:4: a second header separator in the table of line 1"]


# Phrases that tell the story of the work rather than what the product does (a page says what holds and where its
# proof is; history is in CHANGELOG.md and git).
NARRATION = re.compile(r"\b(this session|next session|next GPU run|used to (?:be|loop|list|stop|fail)|fixed since|"
                       r"stop \d+|was not at hand|lent (?:GPU|host|machine)s?|the machines here)\b", re.I)


def narration(path: Path) -> list[str]:
    return [f"{path.name}:{number}: {match.group(0)!r}" for number, line in prose_lines(path.read_text())
            for match in [NARRATION.search(line)] if match]


@pytest.mark.parametrize("path", [p for p in pages() if p.name != "CHANGELOG.md"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_narrates_the_work(path):
    assert narration(path) == []


def test_the_narration_check_finds_a_work_log(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# p\n\nThe drain is fixed since stop 45.\n\n```\nthis session\n```\n")
    assert narration(page) == ["p.md:3: 'fixed since'"]
