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
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait
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
    # Find it: the status filter, a menu in the bar above the list.
    browser.find_element(
        By.XPATH, "//details[@class='outbox-filter']/summary[starts-with(., 'Status')]"
    ).click()
    browser.find_element(By.LINK_TEXT, "Failed").click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 1
    assert "KeyError: 'email'" in rows[0].text
    rows[0].find_element(By.LINK_TEXT, str(job.pk)).click()

    # Read why: the error, the traceback, each attempt.
    assert status_on_page(browser) == "Failed"
    # The traceback is folded on the first screen: a click (or Enter) unfolds it.
    browser.find_element(By.CSS_SELECTOR, "details.outbox-traceback summary").click()
    traceback = browser.find_element(By.CSS_SELECTOR, "details.outbox-traceback pre").text
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


def viewport(browser, width, height):
    """Make the page's viewport (not the window) ``width`` by ``height`` CSS pixels."""
    browser.set_window_size(width, height)
    inner = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    browser.set_window_size(2 * width - inner[0], 2 * height - inner[1])
    assert browser.execute_script("return window.innerWidth") == width


def long_failed_jobs(count):
    error = (
        "ConnectionError: HTTPSConnectionPool(host='payments.example.com', port=443): Max "
        "retries exceeded with url: /v1/charges (Caused by NewConnectionError('<urllib3."
        "connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection'))"
        "\nand a second line"
    )
    payload = {"number": 7, "customer": {"name": "Ada"}}
    return [make_failed(tasks.sends_invoice.enqueue(payload), error=error) for _ in range(count)]


def test_each_failed_job_fits_one_line_at_1280_px_with_the_sidebar_open(browser, live_server):
    User.objects.create_superuser("operator", password="pw")
    long_failed_jobs(8)
    viewport(browser, 1280, 800)
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/job/?status__exact=failed")
    sidebar = browser.find_element(By.ID, "nav-sidebar")
    assert sidebar.is_displayed()
    table = browser.find_element(By.ID, "result_list")
    box = browser.find_element(By.CSS_SELECTOR, "#changelist .results")
    # The table fits its box: nothing to scroll sideways, the error column inside the window.
    assert table.rect["x"] + table.rect["width"] <= box.rect["x"] + box.rect["width"] + 1
    error = browser.find_element(By.CSS_SELECTOR, "#result_list td.field-last_error_short")
    assert error.rect["x"] + error.rect["width"] <= 1280
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == 8
    line = browser.execute_script(
        "return parseFloat(getComputedStyle(document.querySelector('#result_list td')).lineHeight)"
    )
    for row in rows:
        assert row.rect["height"] < 2 * line + 12, row.rect  # one line and its padding
    # The whole start of the error on hover.
    clipped = rows[0].find_element(By.CSS_SELECTOR, ".outbox-error")
    assert clipped.get_attribute("title").startswith("ConnectionError: HTTPSConnectionPool")
    assert clipped.get_attribute("title").endswith("and a second line")
    # At 1024 px the status is still on screen.
    viewport(browser, 1024, 768)
    status = browser.find_element(By.CSS_SELECTOR, "#result_list .outbox-status")
    assert status.rect["x"] + status.rect["width"] <= 1024


def test_a_failed_job_s_error_is_on_the_first_screen_of_a_phone(browser, live_server):
    User.objects.create_superuser("operator", password="pw")
    [job] = long_failed_jobs(1)
    viewport(browser, 390, 844)
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/job/{job.pk}/change/")
    for selector in (".outbox-summary", ".outbox-error-text", ".outbox-retry"):
        element = browser.find_element(By.CSS_SELECTOR, selector)
        assert element.rect["y"] + element.rect["height"] <= 844, selector
        assert element.rect["x"] + element.rect["width"] <= 390, selector


def test_an_operator_retries_and_cancels_with_the_keyboard_alone(browser, live_server):
    User.objects.create_superuser("operator", password="pw")
    failed = make_failed(tasks.noop.enqueue())
    waiting = tasks.noop.enqueue(delay=3600)
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/job/{failed.pk}/change/")
    assert tab_to(browser, "button.outbox-retry")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert messages(browser) == [f"Job {failed.pk} is ready to run again."]
    assert Job.objects.get(pk=failed.pk).status == JobStatus.READY

    browser.get(f"{live_server.url}/admin/django_outbox/job/{waiting.pk}/change/")
    assert tab_to(browser, "a.outbox-cancel")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    # A page that asks; the job waits still.
    assert "will not run" in browser.find_element(By.ID, "content-main").text
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.READY
    assert tab_to(browser, "input.outbox-confirm-cancel")
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert messages(browser) == [f"Job {waiting.pk} was cancelled: it will not run."]
    assert Job.objects.get(pk=waiting.pk).status == JobStatus.CANCELLED


def tab_to(browser, selector, presses=60):
    """Press Tab until the element ``selector`` has the focus; whether it got it."""
    target = browser.find_element(By.CSS_SELECTOR, selector)
    body = browser.find_element(By.TAG_NAME, "body")
    body.click()
    for _ in range(presses):
        browser.switch_to.active_element.send_keys(Keys.TAB)
        if browser.switch_to.active_element == target:
            return True
    return False


def test_the_dashboard_refreshes_its_counts_without_reloading(browser, live_server, monkeypatch):
    from django_outbox.admin import dashboard

    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    User.objects.create_superuser("operator", password="pw")
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/dashboard/")
    browser.execute_script("window.outboxNotReloaded = true")
    assert not browser.find_elements(By.CSS_SELECTOR, "#outbox-queues td.failed-count a")
    job = make_failed(tasks.noop.enqueue())
    link = WebDriverWait(browser, WAIT_SECONDS).until(
        lambda driver: driver.find_element(By.CSS_SELECTOR, "#outbox-queues td.failed-count a")
    )
    assert link.text == "1"
    assert browser.execute_script("return window.outboxNotReloaded") is True
    assert "Updated at" in browser.find_element(By.ID, "outbox-refresh-status").text
    # The number leads to its list.
    link.click()
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert [row.find_element(By.CSS_SELECTOR, "th a").text for row in rows] == [str(job.pk)]


def test_select_all_says_it_acts_on_every_matching_job(browser, live_server, monkeypatch):
    from django_outbox.admin.job_admin import JobAdmin
    from django_outbox.admin.paging import JobPaginator

    monkeypatch.setattr(JobAdmin, "list_per_page", 2)
    # The count's 50 ms limit is for big tables; a loaded test machine can miss it on 3 rows,
    # and the list then (rightly) says "more than 2".
    monkeypatch.setattr(JobPaginator, "count_time_limit", 30)
    User.objects.create_superuser("operator", password="pw")
    for _ in range(3):
        make_failed(tasks.always_fails.enqueue())
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/job/?status__exact=failed")
    browser.find_element(By.ID, "action-toggle").click()
    question = browser.find_element(By.CSS_SELECTOR, ".actions .question")
    assert question.text == "Select every job this search and these filters match (3)"
    question.find_element(By.TAG_NAME, "a").click()
    assert browser.find_element(By.CSS_SELECTOR, ".actions .all").text == (
        "Every job this search and these filters match is selected (3)."
    )


def test_the_refresh_keeps_the_keyboard_s_focus_and_an_unchanged_warning(
    browser, live_server, monkeypatch
):
    import datetime
    import time
    import uuid

    from django.utils import timezone

    from django_outbox.admin import dashboard
    from django_outbox.models import WorkerProcess
    from django_outbox.worker.registration import STALE_MIN_SECONDS

    monkeypatch.setattr(dashboard, "REFRESH_SECONDS", 1)
    User.objects.create_superuser("operator", password="pw")
    make_failed(tasks.noop.enqueue())
    stale = WorkerProcess.objects.create(
        worker_id="gone",
        instance=uuid.uuid4(),
        host="h",
        pid=1,
        queues=[],
        concurrency=1,
        started_at=timezone.now(),
        heartbeat_seconds=1.0,
    )
    WorkerProcess.objects.filter(pk=stale.pk).update(
        last_heartbeat_at=timezone.now() - datetime.timedelta(seconds=STALE_MIN_SECONDS + 5)
    )
    log_in(browser, live_server, "operator")
    browser.get(f"{live_server.url}/admin/django_outbox/dashboard/")
    browser.execute_script("document.querySelector('.outbox-warnings').outboxMark = 1")
    # Refreshes go on while the focus is elsewhere: the warning is the same element after them.
    status = browser.find_element(By.ID, "outbox-refresh-status")
    WebDriverWait(browser, WAIT_SECONDS).until(lambda driver: "Updated at" in status.text)
    assert browser.execute_script("return document.querySelector('.outbox-warnings').outboxMark")
    # With the focus on a figure's link, none replaces it.
    browser.execute_script(
        "const link = document.querySelector('#outbox-queues td.failed-count a');"
        "link.outboxMark = 2; link.focus();"
    )
    time.sleep(2.5)
    assert browser.execute_script("return document.activeElement.outboxMark") == 2
