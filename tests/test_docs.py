"""The README and the guides: every relative link and anchor resolves (a moved section breaks no link)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "helpers" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to dashes."""
    return {re.sub(r"[^a-z0-9 -]", "", heading.lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_resolves(page):
    broken = []
    for match in re.finditer(r"\]\(([^)#\s]+)?(#[^)\s]*)?\)", page.read_text()):
        target, anchor = match.group(1), match.group(2)
        if target and re.match(r"[a-z]+://", target):
            continue
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(match.group(0))
        elif anchor and path.suffix == ".md" and anchor[1:] not in _anchors(path):
            broken.append(match.group(0))
    assert not broken, f"{page.name}: {broken}"


def test_the_readme_stays_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 220, f"README.md has {len(lines)} lines: long guides belong in docs/"
    linked = set(re.findall(r"\]\(docs/([^)#]+)", "\n".join(lines)))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")}, "every guide is linked from the README"
