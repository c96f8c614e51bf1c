"""docs/api.md documents every signal of django_outbox.signals with the arguments it is sent."""

import ast

from django.dispatch import Signal

from django_outbox import signals
from django_outbox.worker import runner
from tests.helpers import REPO

API = (REPO / "docs" / "api.md").read_text()


def defined_signals() -> set[str]:
    return {name for name, value in vars(signals).items() if isinstance(value, Signal)}


def signal_name(signal: Signal) -> str:
    return next(name for name, value in vars(signals).items() if value is signal)


def sent_signal(call: ast.Call) -> str | None:
    """The signal ``call`` sends: ``signals.send(signals.NAME, sender, ...)``, or the runner's
    ``report(job, task, Outcome.NAME, ...)`` (which sends that outcome's signal)."""
    function = call.func
    called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
    first = call.args[0] if call.args else None
    if (
        called == "send"
        and isinstance(first, ast.Attribute)
        and isinstance(first.value, ast.Name)
        and first.value.id == "signals"
    ):
        return first.attr
    if called == "report" and len(call.args) >= 3:
        outcome = call.args[2]
        if isinstance(outcome, ast.Attribute) and getattr(outcome.value, "id", "") == "Outcome":
            return signal_name(runner._TOLD[runner.Outcome[outcome.attr]].signal)
    return None


def sent_arguments() -> dict[str, set[str]]:
    """{signal: the keyword arguments the package sends it with}, read from the source."""
    sent: dict[str, set[str]] = {}
    for path in (REPO / "django_outbox").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and (name := sent_signal(node)) is not None:
                keywords = {keyword.arg for keyword in node.keywords if keyword.arg}
                sent.setdefault(name, set()).update(keywords)
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
