"""The package as the index shows it: its Project-URLs, a long description (the README) whose
every link works there, and no development extra."""

import re

import pytest

from tests.helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the metadata is the same everywhere.

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_project_urls_say_where_its_docs_and_changes_are():
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Changelog"}
    site = urls["Documentation"]
    assert site.startswith("https://")
    assert urls["Changelog"].startswith(site)
    # The README, the long description, links the same site.
    assert f"<{site}>" in (REPO / "README.md").read_text()


def test_every_link_of_the_long_description_is_absolute():
    assert PROJECT["readme"] == "README.md"
    links = LINK.findall((REPO / "README.md").read_text())
    assert len(links) > 10
    for link in links:
        # Relative links break on the index, which shows the README without the repository.
        assert link.startswith(("https://", "http://", "#")), link


def test_development_tools_are_a_dependency_group_not_a_public_extra():
    assert "dev" not in PROJECT["optional-dependencies"]
    groups = PYPROJECT["dependency-groups"]
    assert any(str(requirement).startswith("pytest") for requirement in groups["dev"])
    assert {"include-group": "docs"} in groups["dev"]
    assert "--group docs" in (REPO / ".readthedocs.yaml").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "--group dev" in makefile
    assert ".[dev" not in makefile
