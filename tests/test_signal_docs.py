"""docs/api.md documents every signal of django_outbox.signals with the arguments it is sent."""

import re

from django.dispatch import Signal

from django_outbox import signals
from tests.conftest import REPO

API = (REPO / "docs" / "api.md").read_text()
#: ``signals.send(signals.NAME, sender, key=value, ...)``: how the package sends every signal.
SEND = re.compile(r"signals\.send\(\s*signals\.(\w+),\s*[^,)]+((?:,\s*\w+=[^,)]+)*),?\s*\)")


def defined_signals() -> set[str]:
    return {name for name, value in vars(signals).items() if isinstance(value, Signal)}


def sent_arguments() -> dict[str, set[str]]:
    """{signal: the keyword arguments the package sends it with}, read from the source."""
    sent: dict[str, set[str]] = {}
    for path in (REPO / "django_outbox").rglob("*.py"):
        for name, arguments in SEND.findall(path.read_text()):
            sent.setdefault(name, set()).update(re.findall(r",\s*(\w+)=", arguments))
    return sent


def documented_row(name: str) -> str:
    rows = [line for line in API.splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"docs/api.md has {len(rows)} table rows for the signal {name}"
    return rows[0]


def test_every_signal_is_sent_somewhere():
    assert defined_signals() == set(sent_arguments())


def test_every_signal_is_documented_with_each_argument_it_is_sent():
    # The job_* signals' common arguments are said once, above their table.
    common = "Sent with `sender` the `Task` (None for an unknown task) and `job` the `ClaimedJob`"
    assert common in API
    for name, arguments in sorted(sent_arguments().items()):
        row = documented_row(name)
        for argument in arguments:
            if argument == "job" and name != "job_enqueued":
                continue
            assert f"`{argument}`" in row, f"docs/api.md: {name} does not name `{argument}`"
