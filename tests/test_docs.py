"""The docs hold together: the README is at most 1,000 words with its sections in the user's order; docs/ is a guide
and findings, every page opening with its three-line summary; every relative link (file and anchor) resolves."""

from __future__ import annotations

import re

import pytest

from conftest import REPO

PAGES = sorted([*(REPO / "docs/guide").glob("*.md"), *(REPO / "docs/findings").glob("*.md")])


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_the_users_guide_in_at_most_1000_words():
    text = (REPO / "README.md").read_text()
    words = len(re.sub(r"```.*?```", "", text, flags=re.S).split()) + sum(
        len(b.split()) for b in re.findall(r"```(.*?)```", text, flags=re.S))
    assert words <= 1000, words
    order = [h for h in re.findall(r"^## (.+)$", text, re.M)]
    assert order == ["Install", "Quick start (offline, on CPU)", "Your own model and data", "Methods", "Tests",
                     "Links"], order


def test_docs_are_a_guide_and_findings_and_every_page_opens_with_its_summary():
    assert not list((REPO / "docs").glob("*.md")), "a page belongs in docs/guide/ or docs/findings/"
    for page in PAGES:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[1] == "", page
        summary = []
        for line in lines[2:]:
            if not line.startswith("> "):
                break
            summary.append(line)
        assert len(summary) == 3, (page.name, summary)


@pytest.mark.parametrize("page", [REPO / "README.md", *PAGES, REPO / "benchmarks/README.md"], ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if target.startswith(("http", "mailto")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), (page.name, target)
        if anchor and resolved.suffix == ".md":
            headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", resolved.read_text(), re.M)}
            assert anchor in headings, (page.name, target)
