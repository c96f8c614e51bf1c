"""Sphinx configuration for django-outbox's documentation site (``make docs``).

The pages are the Markdown files of this folder (read by MyST), so that they stay readable on the
repository and their examples keep running in the test suite (tests/docs/). The reference pages
under reference/ are generated from the package's docstrings and management commands, which needs
Django set up: an in-memory SQLite database and the app are enough to import every public name.
"""

from __future__ import annotations

import sys
from pathlib import Path

import django
from django.conf import settings

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

settings.configure(
    INSTALLED_APPS=[
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.messages",
        "django.contrib.sessions",
        "django_outbox",
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
    USE_TZ=True,
)
django.setup()

from importlib.metadata import version as installed_version  # noqa: E402

release = installed_version("django-outbox-queue")

project = "django-outbox"
author = "The django-outbox authors"
copyright = "2026, the django-outbox authors"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    # ```mermaid blocks, which the repository's Markdown view draws too.
    "sphinxcontrib.mermaid",
    "outbox_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# README.md is the folder's page on the repository; index.md is the site's.
exclude_patterns = ["_build", "README.md", "images/*.md"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_fence_as_directive = ["mermaid"]
# Links such as [the dashboard](admin.md#the-dashboard) resolve to the heading's anchor.
myst_heading_anchors = 4

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options: dict[str, object] = {}
# The docstrings are written in Sphinx's own reST flavour with Google-style sections in places.
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Warnings are errors in make docs (-W): a broken link or reference fails the build.
nitpicky = False

html_theme = "furo"
html_title = "django-outbox"
html_static_path: list[str] = []
