"""Run the Python examples of a documentation page, in order, against the test database.

How a page's Python blocks run (tests/docs/markdown_blocks.py describes the directives):

- A block whose first line names a file, ``# shop/tasks.py``, is a module of the reader's
  project: it is executed as module ``shop.tasks`` (in ``sys.modules``, so later blocks import
  it and its tasks are named ``shop.tasks.<function>``). ``# settings.py`` is a fragment of the
  reader's settings: executed on a copy of the test settings it reads, its ``OUTBOX`` must pass
  the system checks and its ``TASKS`` must load, and both then apply to the rest of the page
  (``override_settings``). A page's file blocks are its project: they run first, in order.
- Every other block runs next, in order, in one namespace per page (a doctest session), which
  starts with the public names of the page's modules, as if imported. A line
  ``expression  # => expected`` asserts that the expression equals ``expected`` (a Python
  expression, which may be followed by prose after a colon).
- ``shop.models``, ``blog.models`` and ``billing.client`` are the reader's own modules the
  examples import: real models of tests/docsapp, and a stand-in for an outside API.
- Everything a page declared (tasks, modules, settings, admin registrations) is undone after it.
"""

from __future__ import annotations

import ast
import copy
import io
import re
import sys
import tokenize
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import django
from django.conf import settings
from django.contrib import admin
from django.test import override_settings

from django_outbox.apps import uses_task_backend
from django_outbox.tasks import registry
from django_outbox.validation.setting import setting_errors as outbox_setting_errors
from tests.docs.markdown_blocks import Block

EXPECTATION = re.compile(r"#\s*=>\s*(?P<expected>.+)$")
#: Settings a page may set, and how each is checked and applied.
APPLIED_SETTINGS = frozenset({"OUTBOX", "TASKS"})
CHECKED_SETTINGS = frozenset({"INSTALLED_APPS"})


class BillingClient:
    """A stand-in for the outside API of the docs' billing examples: it records pushes."""

    def __init__(self) -> None:
        self.open = True
        self.pushed: list[Any] = []
        self.charges: dict[str, Any] = {}

    def is_open(self) -> bool:
        return self.open

    def push(self, invoice_id: Any) -> None:
        self.pushed.append(invoice_id)

    def charge(self, order_id: Any, amount: Any, *, idempotency_key: str) -> None:
        """Charge once per key, as payment APIs do with an idempotency key."""
        self.charges.setdefault(idempotency_key, (order_id, amount))


def reader_modules() -> dict[str, dict[str, Any]]:
    """The modules of the reader's project that examples import but no page defines."""
    from tests.docsapp.models import Article, Order, SentReceipt

    return {
        "shop.models": {"Order": Order, "SentReceipt": SentReceipt},
        "blog.models": {"Article": Article},
        "billing.client": {"billing_api": BillingClient()},
    }


def _expected_value(comment: str) -> str:
    """The longest start of ``comment`` that is a Python expression (the rest is prose)."""
    for end in range(len(comment), 0, -1):
        candidate = comment[:end].strip()
        if not candidate or (end < len(comment) and comment[end] not in ":;,. ("):
            continue
        try:
            compile(candidate, "<expected>", "eval")
        except SyntaxError:
            continue
        return candidate
    raise ValueError(f"no expression in '# => {comment}'")


def _with_expectations(code: str, where: str) -> ast.Module:
    """Parse ``code``; each statement ``expr  # => expected`` becomes an assertion."""
    tree = ast.parse(code, filename=where)
    expected_on: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT and (match := EXPECTATION.search(token.string)):
            expected_on[token.start[0]] = _expected_value(match.group("expected"))
    seen = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.end_lineno in expected_on:
            expected = expected_on[node.end_lineno]
            seen.add(node.end_lineno)
            check = ast.parse(f"__expect__(None, ({expected}), None, {expected!r})").body[0]
            assert isinstance(check, ast.Expr)
            assert isinstance(check.value, ast.Call)
            check.value.args[0] = node.value
            check.value.args[2] = ast.Constant(f"{where} (line {node.lineno} of the block)")
            node.value = check.value
    if missing := set(expected_on) - seen:
        raise ValueError(f"{where}: '# =>' after something that is not an expression: {missing}")
    return ast.fix_missing_locations(tree)


def _expect(actual: Any, expected: Any, where: str, text: str) -> None:
    assert actual == expected, f"{where}: the page says {text}, the code gives {actual!r}"


class Page:
    """One page's examples, run in order in one namespace."""

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = [block for block in blocks if block.lang == "python"]
        self.namespace: dict[str, Any] = {"__name__": "docs_example", "__expect__": _expect}
        self.ran: list[str] = []

    def runnable(self) -> list[Block]:
        files = [block for block in self.blocks if block.file]
        others = [block for block in self.blocks if not block.file]
        return files + others

    def run(self) -> list[str]:
        """Run the page; return where each block that ran is."""
        with ExitStack() as undo:
            undo.enter_context(_restored_registries())
            self.modules = undo.enter_context(_reader_project())
            # A module, as code that declares dataclasses and tasks expects to run in.
            module = self.modules("docs_example")
            module.__dict__.update(self.namespace)
            self.namespace = module.__dict__
            self.undo = undo
            for block in self.runnable():
                self._run_block(block)
        return self.ran

    def _exec(self, code: str, where: str, namespace: dict[str, Any]) -> None:
        exec(compile(_with_expectations(code, where), where, "exec"), namespace)

    def _run_block(self, block: Block) -> None:
        if "not run" in block.directives:
            if not block.directives["not run"]:
                raise AssertionError(f"{block.where}: 'not run' needs a reason")
            assert not {"before", "after"} & set(block.directives), block.where
            return
        if "before" in block.directives:
            self._exec(block.directives["before"], f"{block.where} (before)", self.namespace)
        if block.file and block.file.endswith("settings.py"):
            self._run_settings(block)
        elif block.file:
            self._run_module(block, block.file)
        else:
            self._exec(block.code, block.where, self.namespace)
        self.ran.append(block.where)
        if "after" in block.directives:
            self._exec(block.directives["after"], f"{block.where} (after)", self.namespace)

    def _run_module(self, block: Block, path: str) -> None:
        name = path.removesuffix(".py").replace("/", ".")
        module = self.modules(name)
        self._exec(block.code, block.where, module.__dict__)
        # As if the page's other blocks had imported what the module offers.
        self.namespace.update(
            {key: value for key, value in module.__dict__.items() if not key.startswith("_")}
        )

    def _run_settings(self, block: Block) -> None:
        tree = ast.parse(block.code)
        read = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id.isupper() and hasattr(settings, node.id)
        }
        fragment: dict[str, Any] = {name: copy.deepcopy(getattr(settings, name)) for name in read}
        before = copy.deepcopy(fragment)
        self._exec(block.code, block.where, fragment)
        changed = {
            name: value
            for name, value in fragment.items()
            if name.isupper() and (name not in before or before[name] != value)
        }
        unknown = set(changed) - APPLIED_SETTINGS - CHECKED_SETTINGS
        assert not unknown, f"{block.where}: the docs runner cannot apply {sorted(unknown)}"
        if "OUTBOX" in changed:
            errors = outbox_setting_errors(changed["OUTBOX"])
            assert not errors, f"{block.where}: {errors}"
        for app in changed.get("INSTALLED_APPS", []):
            if isinstance(app, str):
                assert app in settings.INSTALLED_APPS, f"{block.where}: no app {app!r}"
        # Later blocks (and ``after``) may read what the settings block set.
        self.namespace.update(changed)
        applied = {name: changed[name] for name in APPLIED_SETTINGS & set(changed)}
        if applied:
            self.undo.enter_context(override_settings(**applied))
        if "TASKS" in applied:
            from django_outbox.backends import OutboxBackend

            backends = _task_backends()
            for alias in applied["TASKS"]:
                assert isinstance(backends[alias], OutboxBackend), block.where


def _task_backends() -> Any:
    if django.VERSION >= (6, 0):
        from django.tasks import task_backends
    else:  # Django 5.2: the backport.
        from django_tasks import task_backends  # type: ignore[no-redef]
    return task_backends


@contextmanager
def _restored_registries() -> Iterator[None]:
    """Undo the tasks, Django tasks and admin registrations a page makes."""
    tasks = dict(registry._tasks)
    admin_registry = dict(admin.site._registry)
    declared: dict[str, Any] | None = None
    if uses_task_backend():
        from django_outbox import backends

        declared = dict(backends._declared)
    try:
        yield
    finally:
        registry._tasks.clear()
        registry._tasks.update(tasks)
        admin.site._registry.clear()
        admin.site._registry.update(admin_registry)
        if declared is not None:
            backends._declared.clear()
            backends._declared.update(declared)


@contextmanager
def _reader_project() -> Iterator[Any]:
    """Yield a function that makes (or returns) a module of the reader's project; the modules
    exist only until the page is done."""
    made: list[str] = []

    def module(name: str) -> types.ModuleType:
        if name in sys.modules and name not in made:
            raise AssertionError(f"the docs' module {name} would shadow an installed one")
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            dotted = ".".join(parts[:depth])
            if dotted not in sys.modules:
                new = types.ModuleType(dotted)
                new.__package__ = dotted if depth < len(parts) else ".".join(parts[:-1])
                if depth < len(parts):
                    new.__path__ = []
                sys.modules[dotted] = new
                made.append(dotted)
                if depth > 1:
                    setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], new)
        return sys.modules[name]

    try:
        for name, names in reader_modules().items():
            module(name).__dict__.update(names)
        yield module
    finally:
        for name in made:
            sys.modules.pop(name, None)
