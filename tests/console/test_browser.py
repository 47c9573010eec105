"""The console in a real browser: an operator finds a run that waits for approval, opens it, edits the tool's input,
approves, and watches Claude's reply stream into the page. Screenshots of the list and the run page are saved to
tests/console/screenshots/ (the README shows them)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.console import serving
from agent_runner.testing import DropMidStream, FakeMessagesAPI, Reply, SlowStream, end_turn, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, delete_file, wait_status

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_tools")]

USER = {"role": "user", "content": "Free some disk space: delete the old files in /var/tmp."}
BASE: dict[str, Any] = {"model": "claude-fake-1", "max_tokens": 1024, "messages": [USER]}
TOKEN = "a-console-token-of-32-characters"
FAST_RETRY = {"initial_interval": "PT0.05S", "maximum_interval": "PT0.1S"}
FINAL = "Deleted /tmp/scratch as you asked. The old files are gone, nothing else was touched, and the disk has room."


def drive(driver: Any, url: str, task_queue: str, run_id: str) -> dict[str, Any]:
    """What an operator does in the page (Selenium is synchronous: this runs in a thread beside the event loop)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(driver, 30, poll_frequency=0.05)
    seen: dict[str, Any] = {}

    # The list: both runs of this test's task queue, the waiting one saying what it waits for (which tool: a worker
    # serves it, so it answers). The console has a token: the first address carries it, the browser keeps it as a
    # cookie, and the address bar loses it.
    for old in SCREENSHOTS.glob("*.png"):
        old.unlink()
    driver.get(f"{url}/?token={TOKEN}&task_queue={task_queue}")
    seen["address"] = driver.current_url
    # The list refreshes itself; Temporal's visibility store shows what the run waits for a moment after it does.
    wait.until(
        lambda d: any("approval (delete_file) 1" in r.text for r in d.find_elements(By.CSS_SELECTOR, "#runs tbody tr"))
    )
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 2)
    seen["list"] = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")]
    driver.save_screenshot(str(SCREENSHOTS / "list.png"))
    Select(driver.find_element(By.ID, "filter")).select_by_value("approval")
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs tbody tr")) == 1)
    seen["filtered"] = [r.get_attribute("data-run-id") for r in driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr")]

    # The run: its pending call, approved with an edited input.
    driver.find_element(By.CSS_SELECTOR, f'tr[data-run-id="{run_id}"] a').click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval textarea"))
    wait.until(lambda d: "Deleting the old files." in d.find_element(By.ID, "transcript").text)
    box = driver.find_element(By.CSS_SELECTOR, ".approval textarea")
    seen["proposed"] = box.get_property("value")
    box.clear()
    box.send_keys('{"path": "/tmp/scratch"}')
    driver.save_screenshot(str(SCREENSHOTS / "run-approval.png"))
    driver.find_element(By.CSS_SELECTOR, ".approval button.approve").click()

    # Claude's reply, as it streams in, until the transcript holds it.
    live: list[tuple[int, str]] = []  # (attempts shown as retracted then, the current attempt's text)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        blocks = driver.find_elements(By.CSS_SELECTOR, "#live .attempt:not(.retracted) .live-text")
        retracted = len(driver.find_elements(By.CSS_SELECTOR, "#live .attempt.retracted"))
        if blocks:
            try:
                live.append((retracted, blocks[-1].text))
            except Exception:  # noqa: BLE001 - the block was replaced between finding and reading it
                pass
            else:
                shot = SCREENSHOTS / "run-streaming.png"
                if retracted and len(live[-1][1]) > len(FINAL) // 3 and not shot.exists():
                    driver.save_screenshot(str(shot))  # the retried attempt half-written, the failed one above it
        if FINAL in driver.find_element(By.ID, "transcript").text:
            break
        time.sleep(0.05)
    seen["live"] = live
    wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#run-head .badge").text == "completed")
    seen["transcript"] = driver.find_element(By.ID, "transcript").text
    seen["events"] = driver.find_element(By.ID, "event-log").text
    seen["retracted"] = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#live .attempt.retracted")]
    seen["live_left"] = len(driver.find_elements(By.CSS_SELECTOR, "#live .attempt:not(.retracted)"))
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(SCREENSHOTS / "run.png"))
    return seen


async def test_an_operator_approves_in_the_page_and_sees_the_reply_stream_in(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, browser: Any
) -> None:
    fake_api.script(
        end_turn("There is nothing to clean in /home."),
        Reply([text("Deleting the old files."), tool_use("toolu_D", "delete_file", {"path": "/var/tmp"})], "tool_use"),
        # The reply's first attempt breaks off after two of its three deltas; Temporal retries it, and it streams.
        DropMidStream(end_turn(FINAL), 5),
        SlowStream(end_turn(FINAL), event_delay=0.1, chunks=30),
    )
    async with worker(delete_file, search_attributes=True):
        done = await runner.start(**{**BASE, "messages": [{"role": "user", "content": "Anything to clean in /home?"}]})
        await done.until_done()
        run = await runner.start(
            **BASE, tools=[delete_file], approval={"tools": ["delete_file"]}, model_activity=FAST_RETRY
        )
        await wait_status(run, "waiting_for_approval")
        async with serving(runner, token=TOKEN) as url:
            seen = await asyncio.to_thread(drive, browser, url, runner.task_queue, run.id)
        result = await run.result()

    assert seen["list"][0].startswith(f"{run.id} waiting for approval approval (delete_file) 1 ")
    assert seen["list"][1].startswith(f"{done.id} completed ")
    assert seen["filtered"] == [run.id]
    assert seen["address"] == f"{url}/?task_queue={runner.task_queue}"
    assert seen["proposed"] == '{\n  "path": "/var/tmp"\n}'
    # The tool ran once, with the operator's input, and Claude's reply came after.
    assert CALLS == ["delete /tmp/scratch"]
    assert result.status == "completed" and result.final_message is not None
    assert fake_api.bodies()[2]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_D", "content": "deleted /tmp/scratch"}
    ]
    # The page showed the reply while it was being written: a part of it, before all of it.
    assert any(n == 1 and 0 < len(part) < len(FINAL) and FINAL.startswith(part) for n, part in seen["live"]), seen[
        "live"
    ]
    assert FINAL in seen["transcript"] and "deleted /tmp/scratch" in seen["transcript"]
    # The attempt that broke off stays in view, marked as retracted; the reply itself is now in the transcript.
    [retracted] = seen["retracted"]
    head, written = retracted.split("\n", 1)
    assert head == "Turn 2 — retracted: this attempt failed and was sent again"
    assert 0 < len(written) < len(FINAL) and FINAL.startswith(written)
    assert seen["live_left"] == 0
    # What happened after the page opened (the call was already waiting then).
    assert seen["events"].split("\n") == [
        "turn 1 toolu_D approved",
        "turn 1 tool delete_file finished",
        "turn 2 attempt 1 retracted: the model call failed and was sent again",
        "turn 2 reply (end_turn)",
        "turn 2 run finished: completed",
    ]
