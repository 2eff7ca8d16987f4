"""The README and docs/: short enough to read, links that lead somewhere, a coverage page that is true.

The README is the first page a newcomer reads, so it keeps to the commands and links; the
detail lives in docs/. docs/coverage.md is generated from the rule tables
(``tests/regen_coverage.py``) and fails here when a table changed without it. The README's
first commands are the ones CI runs (``.ci/run``), so they may not drift either.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from regen_coverage import PAGE, coverage_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

#: inline links and images, ``[text](target)``; reference-style links are not used
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE = re.compile(r"`[^`\n]*`")


def _links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans (a template's ``[x](y)`` is not a link)."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", text)))


def test_coverage_page_is_fresh():
    assert PAGE.read_text(encoding="utf-8") == coverage_markdown(), "stale: run python tests/regen_coverage.py"


def test_readme_is_short():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= 250, f"README.md has {lines} lines: move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_reach_files(page: Path):
    for target in _links(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        assert "#" not in target, f"{page.name}: link {target!r} has an anchor (headings move; link the page)"
        assert (page.parent / target).exists(), f"{page.name}: link {target!r} leads nowhere"


@pytest.mark.parametrize("page", PAGES[1:], ids=[p.name for p in PAGES[1:]])
def test_docs_pages_lead_back_to_the_readme(page: Path):
    assert "../README.md" in _links("\n".join(page.read_text(encoding="utf-8").splitlines()[:5])), (
        f"{page.name}: open with a one-line summary and a link back to the README")


def test_docs_are_linked_from_the_readme():
    linked = {(ROOT / target).resolve() for target in _links(README.read_text(encoding="utf-8"))}
    missing = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


def test_readme_keeps_the_two_commands():
    block = re.search(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"), re.M | re.S)
    assert block, "README.md has no ```bash block"
    for command in ("pip install -e . && tern migrate fixtures/tf/subclassed_model",
                    "python -m pytest -n 2 --dist loadfile -q"):
        assert command in block.group(1), f"the README's first bash block lost {command!r} (.ci/run runs the tests)"
