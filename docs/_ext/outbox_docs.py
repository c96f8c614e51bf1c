"""Sphinx directives that render django-outbox's reference from the code itself.

``outbox-command``: a management command's ``--help`` as argparse prints it, so the reference
cannot drift from the options the command really takes.
"""

from __future__ import annotations

from typing import Any

from django.core.management import load_command_class
from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx


class OutboxCommand(Directive):
    """``.. outbox-command:: run_outbox_worker``: the command's help text, as a literal block."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        name = self.arguments[0]
        command = load_command_class("django_outbox", name)
        parser = command.create_parser("manage.py", name)
        # argparse wraps to $COLUMNS; a fixed width keeps the page the same on every machine.
        parser.formatter_class = _fixed_width(parser.formatter_class)
        return [nodes.literal_block(text=parser.format_help())]


def _fixed_width(formatter_class: Any) -> Any:
    def make(prog: str, **options: Any) -> Any:
        return formatter_class(prog, width=88, **options)

    return make


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("outbox-command", OutboxCommand)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
