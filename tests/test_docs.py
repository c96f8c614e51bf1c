"""The Python in README.md and docs/: it parses, and every name it takes from django_outbox
exists, so that a rename cannot leave the docs pointing at nothing."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2
            blocks.append((f"{path.relative_to(REPO)}:{line}", match.group(1)))
    return blocks


BLOCKS = python_blocks()


def test_the_docs_have_python_to_check():
    assert len(BLOCKS) > 20


def outbox_names(tree: ast.AST) -> list[tuple[str, str]]:
    """(module, name) for each name the code takes from django_outbox: imported from it, or
    read as an attribute of the package (``django_outbox.enqueue``)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_outbox"):
            names += [(str(node.module), alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [
                (alias.name, "") for alias in node.names if alias.name.startswith("django_outbox")
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "django_outbox"
        ):
            names.append(("django_outbox", node.attr))
    return names


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_python_example_parses_and_names_only_what_django_outbox_has(where, code):
    tree = ast.parse(code, filename=where)
    for module_name, name in outbox_names(tree):
        module = importlib.import_module(module_name)
        if name:
            assert hasattr(module, name) or importlib.util.find_spec(f"{module_name}.{name}"), (
                f"{where}: {module_name} has no {name}"
            )


def test_settings_paths_in_the_docs_name_real_objects():
    """Dotted paths in strings (``"django_outbox.backends.OutboxBackend"``) exist."""
    paths = set()
    for path in DOCUMENTS:
        paths |= set(re.findall(r'"(django_outbox(?:\.\w+)+)"', path.read_text()))
    assert paths
    for dotted in sorted(paths):
        module_name, _, name = dotted.rpartition(".")
        try:
            module = importlib.import_module(dotted)
        except ImportError:
            module = importlib.import_module(module_name)
            assert hasattr(module, name), f"{dotted} does not exist"
