"""The docs and the code explain themselves, without pointing at the tracker's issue numbers.

A reader of a page or a comment has no access to "issue 9": what it asked for belongs in the
text itself, and the history of how a figure was reached belongs to git.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import REPO

#: "issue 8", "Issue 13", "issues 8 and 9", "issue #9", "(issue 9, item 4)", "item 3 of issue 8".
ISSUE_NUMBER = re.compile(r"\bissues?(?:\s+#?|#)\d+|\bitem\s+\d+\s+of\b", re.IGNORECASE)

#: Where text is read: the docs site, the README and the changelog, and every source file of the
#: package, its tests, the bench, the tools and the example project (comments, docstrings and
#: messages alike).
CHECKED = [
    REPO / "README.md",
    REPO / "CHANGELOG.md",
    *(REPO / "docs").rglob("*.md"),
    *(
        path
        for folder in ("django_outbox", "tests", "bench", "tools", "example_project")
        for pattern in ("*.py", "*.html", "*.md", "*.txt")
        for path in (REPO / folder).rglob(pattern)
    ),
]


def checked_files() -> list[Path]:
    skipped = {"_build", "__pycache__", ".venv"}
    return sorted(path for path in CHECKED if not skipped & set(path.parts))


def issue_numbers(text: str) -> list[str]:
    return [match.group(0) for match in ISSUE_NUMBER.finditer(text)]


@pytest.mark.parametrize(
    "text",
    [
        "measured for issue 8",
        "Issue 13's search",
        "(issue 9, item 4)",
        "issues 8 and 9",
        "see issue #12",
        "item 3 of the list",
    ],
)
def test_the_pattern_finds_issue_numbers(text):
    assert issue_numbers(text)


@pytest.mark.parametrize(
    "text", ["manage.py check finds no issues", "an issue with 3 workers", "issue8_fixture"]
)
def test_the_pattern_leaves_other_text_alone(text):
    assert not issue_numbers(text)


def test_the_check_reads_the_docs_and_the_code():
    names = {path.relative_to(REPO).as_posix() for path in checked_files()}
    assert {"README.md", "docs/performance.md", "django_outbox/__init__.py"} <= names
    assert any(name.startswith("bench/") for name in names)
    assert Path(__file__).resolve() in {path.resolve() for path in checked_files()}


def test_no_page_or_comment_names_an_issue_number():
    found = []
    for path in checked_files():
        if path.resolve() == Path(__file__).resolve():
            continue  # this module's examples of what the check finds
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            found += [f"{path.relative_to(REPO)}:{number}: {hit}" for hit in issue_numbers(line)]
    assert not found, "say what the issue asked for instead:\n" + "\n".join(found)
