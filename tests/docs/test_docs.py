"""The Python in README.md and docs/ runs, so that the docs cannot rot.

Every Python block parses and names only what django_outbox has. Each page's blocks then run
in order against the test database (tests/docs/runner.py says how), except blocks marked
``<!-- not run: reason -->`` (tests/docs/markdown_blocks.py lists the directives) and the
quickstart's project files, which tests/docs/test_quickstart.py builds into a project and runs.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

import django
import pytest

from django_outbox.apps import uses_task_backend
from tests.docs.markdown_blocks import REPO, Block, parse
from tests.docs.runner import Page

#: The pages of the documentation site (docs/, without its build) and the README.
DOCUMENTS = [
    REPO / "README.md",
    *sorted(path for path in (REPO / "docs").rglob("*.md") if "_build" not in path.parts),
]
PAGES = {document: parse(document) for document in DOCUMENTS}
BLOCKS = [block for blocks in PAGES.values() for block in blocks if block.lang == "python"]
#: Blocks that are files of the quickstart's project, run by tests/docs/test_quickstart.py.
QUICKSTART = {"file", "append"}


def is_run_here(block: Block) -> bool:
    return not ({"not run"} | QUICKSTART) & set(block.directives)


def test_the_docs_have_python_to_check():
    assert len(BLOCKS) > 20


def test_most_python_examples_are_run_not_only_parsed():
    run = [block for block in BLOCKS if is_run_here(block)]
    assert len(run) >= 30, [block.where for block in BLOCKS if not is_run_here(block)]


def test_blocks_not_run_say_why_and_project_files_are_the_quickstart_s():
    for blocks in PAGES.values():
        for block in blocks:
            if "not run" in block.directives:
                assert len(block.directives["not run"]) > 10, f"{block.where}: say why"
            if QUICKSTART & set(block.directives):
                assert block.document.name == "quickstart.md", block.where


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


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_a_python_example_parses_and_names_only_what_django_outbox_has(block):
    tree = ast.parse(block.code, filename=block.where)
    for module_name, name in outbox_names(tree):
        module = importlib.import_module(module_name)
        if name:
            assert hasattr(module, name) or importlib.util.find_spec(f"{module_name}.{name}"), (
                f"{block.where}: {module_name} has no {name}"
            )


RUN_PAGES = [
    document
    for document, blocks in PAGES.items()
    if any(block.lang == "python" and is_run_here(block) for block in blocks)
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "document", RUN_PAGES, ids=[str(page.relative_to(REPO)) for page in RUN_PAGES]
)
def test_the_python_examples_of_a_page_run(document: Path):
    if document.name == "django-tasks.md" and (django.VERSION < (6, 0) or not uses_task_backend()):
        pytest.skip("the page imports django.tasks (Django 6); the backport's names differ")
    page = Page([block for block in PAGES[document] if not QUICKSTART & set(block.directives)])
    ran = page.run()
    assert ran == [block.where for block in page.runnable() if is_run_here(block)]


def page_of(tmp_path: Path, text: str) -> Page:
    document = tmp_path / "page.md"
    document.write_text(text)
    return Page(parse(document))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("```python\nsum([1, 2])  # => 4: the sum\n```\n", "the page says 4"),
        ("```python\nundefined_name.enqueue({})\n```\n", "undefined_name"),
        ("```python\nx = 1\n```\n<!-- after:\nassert x == 2, 'after failed'\n-->\n", "after"),
        ("```python\n# settings.py\nOUTBOX = {'LEASE_SECONDS': -1}\n```\n", "LEASE_SECONDS"),
        ("```python\n# settings.py\nDEBUG_PROPAGATE_EXCEPTIONS = 1\n```\n", "cannot apply"),
    ],
)
def test_the_runner_fails_on_a_wrong_example(tmp_path, text, error):
    """The runner can fail: a result the page states wrongly, a name it never defines, a
    failed check, settings the checks refuse, a setting it cannot apply."""
    with pytest.raises(Exception, match=error):
        page_of(tmp_path, text).run()


def test_the_runner_does_not_run_blocks_marked_not_run(tmp_path):
    page = page_of(
        tmp_path,
        "<!-- not run: a fragment, for the sake of this test -->\n"
        "```python\nraise SystemExit\n```\n\n```python\nx = 1  # => None\n```\n",
    )
    with pytest.raises(ValueError, match="not an expression"):
        page.run()
    assert page.ran == []


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


CONFIGURATION = REPO / "docs" / "configuration.md"


def configuration_table() -> dict[str, str]:
    """The key table of docs/configuration.md: key -> its default cell, as written."""
    text = CONFIGURATION.read_text()
    table = text[text.index("| key | default | meaning |") :].split("\n\n", 1)[0]
    return dict(re.findall(r"^\| `([A-Z_]+)` \| (.+?) \|", table, re.M))


def test_configuration_md_lists_every_key_with_its_default():
    from django_outbox.validation.setting import DEFAULTS

    table = configuration_table()
    (example,) = [block for block in PAGES[CONFIGURATION] if "DATABASE" in block.code]
    shown: dict[str, object] = {}
    exec(example.code, shown)
    for key, default in DEFAULTS.items():
        assert key in table, f"docs/configuration.md has no row for OUTBOX[{key!r}]"
        cell = table[key].strip("`")
        value = shown["OUTBOX"][key] if cell == "see above" else ast.literal_eval(cell)  # type: ignore[index]
        assert value == default, f"docs/configuration.md: {key} defaults to {default!r}"
    assert set(table) == set(DEFAULTS), "docs/configuration.md lists keys that do not exist"


def test_configuration_md_names_every_option_of_a_queue_retry_and_retention():
    from django_outbox.validation.setting import QUEUE_KEYS, RETENTION_KEYS, RETRY_KEYS

    text = CONFIGURATION.read_text()
    for key in sorted(QUEUE_KEYS | RETRY_KEYS | RETENTION_KEYS):
        assert f"`{key}`" in text or f'"{key}"' in text, key


def test_configuration_md_explains_every_system_check():
    # Wherever a check's error is made: validation.setting, cron/checks.py, ...
    ids = {
        check_id
        for path in (REPO / "django_outbox").rglob("*.py")
        for check_id in re.findall(r"django_outbox\.[EW]\d{3}", path.read_text())
    }
    assert len(ids) >= 12
    documented = set(
        re.findall(r"^\| `(django_outbox\.[EW]\d{3})` \|", CONFIGURATION.read_text(), re.M)
    )
    assert sorted(ids - documented) == [], "check ids missing from docs/configuration.md"
    assert sorted(documented - ids) == [], "docs/configuration.md explains checks that do not exist"


def test_the_site_s_index_lists_every_page_and_the_readme_links_the_site():
    # Sphinx refuses a page outside every toctree too (make docs, warnings as errors); this
    # says which page, without building the site.
    index = (REPO / "docs" / "index.md").read_text()
    listed = set(re.findall(r"^([\w/-]+)$", index, re.M))
    pages = {
        str(path.relative_to(REPO / "docs").with_suffix(""))
        for path in DOCUMENTS
        if path.parent != REPO
    } - {"index", "README"}
    assert sorted(pages - listed) == [], "pages missing from docs/index.md's tables of contents"
    readme = (REPO / "README.md").read_text()
    for page in ("quickstart", "concepts", "enqueueing", "workers", "reference/changelog"):
        assert re.search(rf"\]\(https://[^)]+/{page}\.html\)", readme), page


def test_the_commands_and_worker_options_the_docs_name_exist():
    from django.core.management import get_commands, load_command_class

    texts = [path.read_text() for path in DOCUMENTS]
    commands = {name for text in texts for name in re.findall(r"manage\.py ([a-z_]+)", text)}
    assert {"run_outbox_worker", "migrate"} <= commands
    assert sorted(commands - set(get_commands())) == []

    parser = load_command_class("django_outbox", "run_outbox_worker").create_parser(
        "manage.py", "run_outbox_worker"
    )
    known = {option for action in parser._actions for option in action.option_strings}
    # Lines that run the worker, and the table of its options in docs/workers.md.
    lines = [line for text in texts for line in text.splitlines() if "run_outbox_worker" in line]
    lines += re.findall(r"^\| `--.*$", (REPO / "docs" / "workers.md").read_text(), re.M)
    named = {option for line in lines for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", line)}
    assert {"--burst", "--concurrency", "--processes"} <= named
    assert sorted(named - known) == [], "options of run_outbox_worker the docs name"
