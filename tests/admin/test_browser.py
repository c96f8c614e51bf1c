"""The admin in a real browser: an operator finds a failed job, reads why it failed,
fixes its payload, retries it and sees it succeed, without leaving Django.

Headless Chromium from Debian's packages (``chromium``, ``chromium-driver``), driven with
Selenium; ``make test`` installs them where missing (``.ci/ensure-chromium``). Nothing downloads a
browser: the driver and the browser are given by path. Where they are missing these tests skip,
saying what is missing. Each test starts its own browser with its own profile, so that two
runs at once (the suite's SQLite and PostgreSQL legs) don't meet.
"""

import json
import shutil

import pytest
from django.contrib.auth.models import User

from django_outbox.models import Job, JobStatus
from tests.admin.helpers import make_failed, staff_with
from tests.helpers import run_worker
from tests.testapp import tasks
from tests.testapp.models import Note

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

MISSING = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
except ImportError:  # pragma: no cover - the dev extra installs it
    MISSING.append("selenium (pip install --group dev)")

#: How long the browser waits for an element to appear.
WAIT_SECONDS = 10


@pytest.fixture
def browser(tmp_path):
    if MISSING:
        pytest.skip(
            "The browser tests need Debian's chromium and chromium-driver (apt-get install "
            f"chromium chromium-driver; make test does it as root). Missing: {', '.join(MISSING)}."
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for argument in (
        "--headless=new",
        # Root in a container has no user namespace to sandbox with.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(argument)
    # The paths are given: Selenium Manager, which may download drivers, is not needed.
    service = Service(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.implicitly_wait(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser, live_server, username, password="pw"):
    browser.get(f"{live_server.url}/admin/login/?next=/admin/django_outbox/job/")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    assert browser.find_element(By.ID, "changelist")


def messages(browser):
    return [element.text for element in browser.find_elements(By.CSS_SELECTOR, ".messagelist li")]


def status_on_page(browser):
    return browser.find_element(By.CSS_SELECTOR, ".field-status_display .outbox-status").text


def test_an_operator_finds_a_failed_job_fixes_its_payload_and_sees_it_succeed(browser, live_server):
    User.objects.create_superuser("operator", password="pw")
    tasks.noop.enqueue()
    job = tasks.sends_invoice.enqueue({"number": 7, "customer": {"name": "Ada"}})
    run_worker()
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED

    log_in(browser, live_server, "operator")
    # Find it: the status filter.
    browser.find_element(By.LINK_TEXT, "Failed").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    assert "KeyError: 'email'" in rows[0].text
    rows[0].find_element(By.LINK_TEXT, str(job.pk)).click()

    # Read why: the error, the traceback, each attempt.
    assert status_on_page(browser) == "Failed"
    traceback = browser.find_element(By.CSS_SELECTOR, ".field-traceback_display pre").text
    assert "Traceback (most recent call last)" in traceback
    assert "KeyError: 'email'" in traceback
    history = browser.find_element(By.CSS_SELECTOR, "table.outbox-history").text
    assert "attempt 1 failed" in history
    assert "attempt 2 failed" in history

    # Fix it: a typo first, refused with the text kept, then the fixed payload.
    browser.find_element(By.CSS_SELECTOR, "a.outbox-edit-payload").click()
    textarea = browser.find_element(By.NAME, "payload")
    assert json.loads(textarea.get_attribute("value")) == job.payload
    typo = '{"number": 7, "customer": {"name": "Ada", "email": ada@example.com}}'
    textarea.clear()
    textarea.send_keys(typo)
    browser.find_element(By.NAME, "_save").click()
    assert "This is not valid JSON" in browser.find_element(By.CSS_SELECTOR, ".errorlist").text
    textarea = browser.find_element(By.NAME, "payload")
    assert textarea.get_attribute("value") == typo
    textarea.clear()
    textarea.send_keys(typo.replace("ada@example.com", '"ada@example.com"'))
    browser.find_element(By.NAME, "_save").click()
    assert messages(browser) == [
        f"The payload of job {job.pk} was saved; the job is ready to run again."
    ]
    assert status_on_page(browser) == "Ready"

    # A worker runs it; the operator reloads the page and sees it succeeded.
    run_worker()
    browser.refresh()
    assert status_on_page(browser) == "Succeeded"
    history = browser.find_element(By.CSS_SELECTOR, "table.outbox-history").text
    assert "Edited the payload and retried" in history
    assert "attempt 3 succeeded" in history
    assert Note.objects.get().text == "invoice 7 to ada@example.com"


def test_the_retry_action_on_the_list_retries_and_says_how_many(browser, live_server):
    User.objects.create_superuser("operator", password="pw")
    job = make_failed(tasks.noop.enqueue(), error="ConnectionError: the API was down")
    log_in(browser, live_server, "operator")
    browser.find_element(By.CSS_SELECTOR, f"input.action-select[value='{job.pk}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("retry_selected")
    browser.find_element(By.NAME, "index").click()
    assert messages(browser) == ["1 job is ready to run again."]
    run_worker()
    browser.get(f"{live_server.url}/admin/django_outbox/job/{job.pk}/change/")
    assert status_on_page(browser) == "Succeeded"


def test_a_user_who_may_only_view_jobs_is_offered_no_action_and_refused_one(browser, live_server):
    staff_with("view_job")
    job = make_failed(tasks.noop.enqueue())
    log_in(browser, live_server, "staff")
    # Absent elements: no waiting for them to appear.
    browser.implicitly_wait(0)
    assert not browser.find_elements(By.NAME, "action")
    browser.get(f"{live_server.url}/admin/django_outbox/job/{job.pk}/change/")
    assert status_on_page(browser) == "Failed"
    assert not browser.find_elements(By.CLASS_NAME, "outbox-edit-payload")
    assert not browser.find_elements(By.CLASS_NAME, "outbox-retry")
    browser.get(f"{live_server.url}/admin/django_outbox/job/{job.pk}/edit-payload/")
    assert "403" in browser.title or "Forbidden" in browser.page_source
    assert Job.objects.get(pk=job.pk).status == JobStatus.FAILED
