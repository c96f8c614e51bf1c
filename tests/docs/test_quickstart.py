"""docs/quickstart.md, followed to the letter: a new Django project built in a temporary
directory from the page's blocks, its commands run in order, its worker run, its admin read.

How the page's blocks are used (tests/docs/markdown_blocks.py parses the directives):

- ``sh`` blocks: each line is a command, run in the project's directory with the suite's
  Python (``python`` and ``django-admin`` are this virtualenv's: the package is installed
  here, so nothing is downloaded). Two commands are interactive or endless, and are run the way
  a person would: ``createsuperuser`` gets its password from ``DJANGO_SUPERUSER_PASSWORD``
  (``--noinput``), and ``runserver`` is started on a free port, asked for the admin's job list
  as the superuser, then stopped.
- ``<!-- file: path -->`` and ``<!-- append: path -->`` blocks write or extend project files.
- ``<!-- output: ... -->`` blocks: each line is in what the command before them printed.
- Blocks marked ``<!-- not run: reason -->`` are skipped; any other block fails the test.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import shlex
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.docs.markdown_blocks import REPO, Block, parse

pytestmark = pytest.mark.docs

QUICKSTART = REPO / "docs" / "quickstart.md"
BIN = Path(sys.executable).parent
PASSWORD = "quickstart-password-7"
COMMAND_TIMEOUT = 120


def project_env() -> dict[str, str]:
    """The environment of a new project's shell: none of the suite's settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "DATABASE_URL"}
        and not name.startswith("OUTBOX_")
    }
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["DJANGO_SUPERUSER_PASSWORD"] = PASSWORD
    return env


def argv_of(line: str) -> list[str]:
    argv = shlex.split(line)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "django-admin":
        argv[0] = str(BIN / "django-admin")
    if argv[1:3] == ["manage.py", "createsuperuser"]:
        argv.append("--noinput")
    return argv


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def admin_job_list(project: Path, argv: list[str]) -> str:
    """Start ``runserver``, log in to the admin as the superuser, return the job list page."""
    port = free_port()
    server = subprocess.Popen(
        [*argv, "--noreload", f"127.0.0.1:{port}"],
        cwd=project,
        env=project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                login = opener.open(f"{base}/admin/login/", timeout=5).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login)
        assert match, login
        form = urllib.parse.urlencode(
            {
                "csrfmiddlewaretoken": match.group(1),
                "username": "admin",
                "password": PASSWORD,
                "next": "/admin/django_outbox/job/",
            }
        ).encode()
        page = opener.open(f"{base}/admin/login/", data=form, timeout=10)
        assert page.url.endswith("/admin/django_outbox/job/"), page.url
        return str(page.read().decode())
    finally:
        server.terminate()
        server.communicate(timeout=10)


def test_the_quickstart_builds_a_project_whose_job_runs_and_shows_in_the_admin(tmp_path):
    project = tmp_path / "quickstart"
    project.mkdir()
    ran: list[str] = []
    output = ""
    admin_page = ""
    for block in parse(QUICKSTART):
        if "not run" in block.directives:
            continue
        if "output" in block.directives:
            for line in block.code.splitlines():
                assert line in output, f"{block.where}: {line!r} not in the output:\n{output}"
        elif "file" in block.directives or "append" in block.directives:
            write(project, block)
        elif block.lang == "sh":
            for line in block.code.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                argv = argv_of(line)
                ran.append(" ".join(shlex.split(line)[:3]))
                if argv[1:3] == ["manage.py", "runserver"]:
                    admin_page = admin_job_list(project, argv)
                    continue
                done = subprocess.run(
                    argv,
                    cwd=project,
                    env=project_env(),
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_TIMEOUT,
                    check=False,
                )
                assert done.returncode == 0, f"{block.where}: {line}\n{done.stdout}{done.stderr}"
                output = done.stdout
        else:
            raise AssertionError(f"{block.where}: a block the quickstart's test does not run")

    # The page's steps were all there...
    for step in [
        "django-admin startproject mysite",
        "python manage.py migrate",
        "python manage.py shell",
        "python manage.py run_outbox_worker",
        "python manage.py createsuperuser",
        "python manage.py runserver",
    ]:
        assert step in ran, f"the quickstart no longer runs {step!r}: {ran}"
    # ... and did what it says: the job ran once, in the worker, and the admin lists it.
    with sqlite3.connect(project / "db.sqlite3") as database:
        jobs = database.execute("SELECT task_name, status, attempts FROM django_outbox_job")
        assert jobs.fetchall() == [("greetings.tasks.welcome", "succeeded", 1)]
        signups = database.execute("SELECT email, welcomed_at IS NOT NULL FROM greetings_signup")
        assert signups.fetchall() == [("ada@example.com", 1)]
    assert "greetings.tasks.welcome" in admin_page
    assert "Succeeded" in admin_page


def write(project: Path, block: Block) -> None:
    key = "file" if "file" in block.directives else "append"
    path = project / block.directives[key]
    if key == "file":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.code)
    else:
        assert path.exists(), f"{block.where}: {path} should exist by now"
        path.write_text(path.read_text() + "\n\n" + block.code)
