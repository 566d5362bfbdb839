"""The qvc serve page, driven in headless Chromium: open a run, see its timeline, continue it
from an inner boundary and see the new fork appear; a run another process writes appears live.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them). In CI
(``CI=true``) the test runs or fails; elsewhere it is skipped when they are missing. A screenshot
is saved to ``$QVC_TEST_ARTIFACTS`` (default ``tests/artifacts/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, child_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if os.environ.get("CI") != "true":
    pytest.importorskip("fastapi", reason='qvc serve needs the server extra: pip install -e ".[test]"')
    pytest.importorskip("selenium", reason='selenium is in the test extra: pip install -e ".[test]"')
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("headless Chromium is not installed (apt-get install chromium chromium-driver)",
                    allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_server import WRITER, Server  # noqa: E402

from qvc.runs import Runs  # noqa: E402
from samples.scripted_agent import QUESTION, RESEARCH_PLAN, SYSTEM, ScriptedModel, drive, make_tools  # noqa: E402


def text_in(element_id: str, text: str):
    """A wait condition on an element's text as written (``.text`` is as rendered: uppercased headings)."""
    return lambda d: text in (d.find_element(By.ID, element_id).get_attribute("textContent") or "")


def click(css: str):
    """A wait condition that clicks the element once it is there (live refreshes redraw the page)."""
    def attempt(d):
        try:
            d.find_element(By.CSS_SELECTOR, css).click()
        except (NoSuchElementException, StaleElementReferenceException):
            return False
        return True
    return attempt


def attribute(css: str, name: str):
    """A wait condition returning an attribute of the element once it is there."""
    def attempt(d):
        try:
            return d.find_element(By.CSS_SELECTOR, css).get_attribute(name)
        except (NoSuchElementException, StaleElementReferenceException):
            return False
    return attempt


def timeline(d) -> list:
    """The timeline rows as ``[message index, text]``, read in one go (refreshes redraw them)."""
    return d.execute_script("return [...document.querySelectorAll('#timeline tr.entry')]"
                            ".map((r) => [r.dataset.index, r.textContent])")


ARTIFACTS = Path(os.environ.get("QVC_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts")


@pytest.fixture
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_open_run_continue_from_inner_boundary_and_see_the_fork(tmp_path, browser):
    repo = tmp_path / "runs.qvc"
    with Runs(repo) as runs:
        with runs.start(QUESTION, system=SYSTEM, session_id="s1", run_id="done") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
    server = Server(repo)
    try:
        wait = WebDriverWait(browser, 20)
        browser.get(server.page)
        wait.until(text_in("live", "live"))
        wait.until(click('li[data-thread="run/s1/done"]'))

        # The timeline: one row per checkpoint, with message previews.
        rows = wait.until(lambda d: timeline(d) if len(timeline(d)) == 4 else False)
        assert [index for index, _ in rows] == ["5", "7", "9", "10"]
        assert "Tokyo: 14.1 million" in rows[0][1] and "Answer:" in rows[-1][1]
        wait.until(text_in("thread-info", "COMPLETED"))
        assert len(browser.find_elements(By.CSS_SELECTOR, "#graph .node")) == 4
        assert not browser.find_elements(By.CSS_SELECTOR, "#graph .node.fork")

        # Open an inner checkpoint: its snapshot and its diff against the parent.
        wait.until(click('#timeline tr.entry[data-index="7"] td.preview'))
        wait.until(text_in("snapshot", "The run at message 7"))
        assert len(browser.find_elements(By.CSS_SELECTOR, "#snapshot .messages li")) == 7
        wait.until(text_in("cp-diff", "messages"))  # the run as a conversation, not its segments

        # Continue from the inner boundary at message 7: a COMPLETED run continues in a new fork.
        browser.find_element(By.ID, "continue-input").send_keys("and Berlin?")
        wait.until(click('#timeline tr.entry[data-index="7"] button.continue'))
        wait.until(text_in("notice", "forked at message 7"))
        new_thread = wait.until(attribute("#graph .node.fork", "data-thread"))
        assert new_thread.startswith("run/s1/") and new_thread != "run/s1/done"
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'li[data-thread="{new_thread}"]')))
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "serve-page.png"))

        # The fork opens on its own: its line crosses into the source at message 7.
        wait.until(click(f'#graph .node.fork[data-thread="{new_thread}"] text'))
        wait.until(text_in("thread-name", new_thread))
        [(_, text)] = wait.until(lambda d: timeline(d) if len(timeline(d)) == 1 else False)
        assert "and Berlin?" in text

        # Another process records a run: it appears without a reload (server-sent events).
        writer = subprocess.run([sys.executable, "-c", WRITER, str(repo), "live-1"], env=child_env(),
                                capture_output=True, text=True, timeout=60, cwd=str(ROOT))
        assert writer.returncode == 0, writer.stderr
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, 'li[data-thread="run/live/live-1"]')))
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "serve-page-failure.png"))
        print("browser log:", browser.get_log("browser"))
        print("snapshot:", browser.find_element(By.ID, "snapshot").get_attribute("innerHTML")[:500])
        print("notice:", browser.find_element(By.ID, "notice").text)
        raise
    finally:
        assert server.stop() == 0


def test_the_page_opens_threads_with_any_id(tmp_path, browser):
    """Thread ids are arbitrary strings: a newline, control characters, 300 characters."""
    from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore

    repo = tmp_path / "odd.qvc"
    odd = ["a\nb", "\x01x", "t" * 300]
    with GitCheckpointStore(repo) as store:
        for k, thread in enumerate(odd):
            for step in range(2):
                store.put(CheckpointConfig(thread), Checkpoint(id=f"id{k}-{step}", thread_id=thread, step=step,
                                                               state_data={"n": step}), {"source": "loop"})
    server = Server(repo)
    try:
        wait = WebDriverWait(browser, 20)
        browser.get(server.page)
        wait.until(text_in("live", "live"))
        pick = "const t = arguments[0]; const li = [...document.querySelectorAll('li[data-thread]')]" \
               ".find((n) => n.dataset.thread === t); if (li) li.click(); return !!li;"
        for k, thread in enumerate(odd):
            wait.until(lambda d, t=thread: d.execute_script(pick, t))
            wait.until(lambda d, t=thread: d.execute_script("return document.getElementById('thread-name')"
                                                            ".textContent === arguments[0]", t))
            wait.until(text_in("thread-info", "2 checkpoint(s) on the line"))
            wait.until(text_in("cp-id", f"id{k}-1"))
            assert not browser.find_element(By.ID, "notice").get_attribute("textContent").strip()
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        assert server.stop() == 0
