"""The package as the index shows it: its Project-URLs, and a long description (the README)
whose every link works there."""

import re

import pytest

from tests.helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the metadata is the same everywhere.

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_project_urls_say_where_its_code_docs_issues_and_changes_are():
    urls = PROJECT["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    repository = urls["Repository"]
    assert repository.startswith("https://")
    for name in ("Issues", "Changelog"):
        assert urls[name].startswith(repository + "/"), name
    assert urls["Documentation"].startswith("https://")
    assert urls["Documentation"].endswith("/")
    assert urls["Changelog"].endswith("/blob/main/CHANGELOG.md")


def test_every_link_of_the_long_description_is_absolute_and_names_a_page_that_exists():
    assert PROJECT["readme"] == "README.md"
    blob = PROJECT["urls"]["Repository"] + "/blob/main/"
    site = PROJECT["urls"]["Documentation"]
    links = LINK.findall((REPO / "README.md").read_text())
    assert len(links) > 10
    assert any(link.startswith(site) for link in links)
    for link in links:
        # Relative links break on the index, which shows the README without the repository.
        assert link.startswith(("https://", "http://", "#")), link
        if link.startswith(blob):
            path = link.removeprefix(blob).split("#")[0]
            assert (REPO / path).is_file(), link
        if link.startswith(site):
            # A page of the site is built from the Markdown file of the same path in docs/.
            page = link.removeprefix(site).split("#")[0].removesuffix(".html")
            assert (REPO / "docs" / f"{page}.md").is_file(), link


def test_development_tools_are_a_dependency_group_not_a_public_extra():
    assert "dev" not in PROJECT["optional-dependencies"]
    groups = PYPROJECT["dependency-groups"]
    assert any(str(requirement).startswith("pytest") for requirement in groups["dev"])
    # The documentation's tools are a group of their own, which Read the Docs installs.
    assert {"include-group": "docs"} in groups["dev"]
    assert "--group docs" in (REPO / ".readthedocs.yaml").read_text()
    makefile = (REPO / "Makefile").read_text()
    assert "--group dev" in makefile
    assert ".[dev" not in makefile
