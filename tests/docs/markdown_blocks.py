"""The fenced code blocks of a Markdown page, with the directives that say how a test uses them.

A directive is an HTML comment (invisible once the page is rendered) on the lines right before
a block's opening fence, or, for ``after``, right after its closing fence:

``<!-- not run: reason -->``
    The block is not executed (a deployment file, a shell session, a fragment of a larger
    whole); the reason is required. Python blocks are still parsed and their names checked.
``<!-- before: code -->`` and ``<!-- after: code -->``
    Python run in the page's namespace before or after the block, where the reader's own
    project would supply something (an object in the database, a job id), or to check what the
    block did (``assert ...``).
``<!-- file: path -->`` and ``<!-- append: path -->`` (the quickstart)
    The block is the whole of file ``path`` of the project, or is added at its end.
``<!-- output: description -->`` (the quickstart)
    Each line of the block is in what the shell block before it printed.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DIRECTIVES = frozenset({"not run", "before", "after", "file", "append", "output"})
#: A fence's opening: a language (```python) or a Sphinx directive with its argument
#: (```{toctree}, ```{outbox-command} run_outbox_worker), whose lang is then "{toctree}".
OPENING = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>\{[\w-]+\}|[\w-]*)(?:[ ]+\S.*)?\s*$")
COMMENT = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$", re.S)
DIRECTIVE = re.compile(r"^\s*(?P<key>[a-z][a-z ]*?)\s*:(?P<value>.*)$", re.S)
#: A Python block whose first line names a file of the reader's project: ``# shop/tasks.py``.
FILE_LINE = re.compile(r"^# (?P<path>[\w/]+\.py)\s*$")


@dataclass
class Block:
    """One fenced block of a page."""

    document: Path
    line: int  # of the block's first line of code, 1-based
    lang: str
    code: str
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        document = self.document
        if document.is_relative_to(REPO):
            document = document.relative_to(REPO)
        return f"{document}:{self.line}"

    @property
    def file(self) -> str | None:
        """The project file a Python block is (its first line ``# path.py``), if any."""
        first = self.code.split("\n", 1)[0]
        match = FILE_LINE.match(first)
        return match.group("path") if match else None


def _directive(comment: str) -> tuple[str, str] | None:
    match = DIRECTIVE.match(comment)
    if match is None or match.group("key") not in DIRECTIVES:
        return None
    value = match.group("value")
    # Code in before/after keeps its own indentation, relative to its first line.
    return match.group("key"), textwrap.dedent(value.strip("\n")).strip()


def parse(document: Path) -> list[Block]:
    """Return the fenced blocks of ``document`` in order, with their directives."""
    lines = document.read_text().split("\n")
    blocks: list[Block] = []
    pending: dict[str, str] = {}
    # The block an ``after`` comment belongs to: the last one, if only blank lines follow it.
    previous: Block | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.strip().startswith("<!--"):
            end = index
            while "-->" not in lines[end]:
                end += 1
            match = COMMENT.match("\n".join(lines[index : end + 1]))
            directive = _directive(match.group("body")) if match else None
            if directive is not None:
                key, value = directive
                if key == "after":
                    if previous is None:
                        raise ValueError(f"{document}:{index + 1}: 'after' follows no block")
                    previous.directives["after"] = value
                else:
                    if key in pending:
                        raise ValueError(f"{document}:{index + 1}: a second {key!r}")
                    pending[key] = value
            index = end + 1
            continue
        opening = OPENING.match(line)
        if opening:
            indent = opening.group("indent")
            end = index + 1
            while lines[end].strip() != "```":
                end += 1
            code = "\n".join(
                body[len(indent) :] if body.startswith(indent) else body.lstrip()
                for body in lines[index + 1 : end]
            )
            block = Block(document, index + 2, opening.group("lang"), code + "\n", pending)
            blocks.append(block)
            pending = {}
            previous = block
            index = end + 1
            continue
        if line.strip():
            if pending:
                raise ValueError(
                    f"{document}:{index + 1}: directives {sorted(pending)} are not right "
                    "before a code block"
                )
            previous = None
        index += 1
    return blocks
