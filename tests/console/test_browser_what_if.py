"""A what-if from a run's page in a real browser: an operator forks a completed run on another model with "this
run's results only", and the new run's page shows the call the run had made answered from its record, and the new
call refused, with no tool run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.console import serving
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, delete_file

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_tools")]

USER = {"role": "user", "content": "Clean up /tmp/a."}
FINAL = "Deleted /tmp/a; /tmp/b was left alone."


def fork_what_if(driver: Any, url: str, run_id: str) -> dict[str, str]:
    """What an operator does in the page (Selenium is synchronous: this runs in a thread beside the event loop)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(driver, 30, poll_frequency=0.05)
    driver.get(f"{url}/runs/{run_id}")
    wait.until(lambda d: d.find_elements(By.ID, "fork-model"))
    turn = driver.find_element(By.ID, "fork-turn")
    turn.clear()
    turn.send_keys("1")
    driver.find_element(By.ID, "fork-model").send_keys("claude-fake-2")
    Select(driver.find_element(By.ID, "fork-tool-results")).select_by_value("recorded_only")
    driver.find_element(By.ID, "fork").click()
    wait.until(lambda d: d.current_url != f"{url}/runs/{run_id}")
    wait.until(lambda d: FINAL in d.find_element(By.ID, "transcript").text)
    return {"address": driver.current_url, "transcript": driver.find_element(By.ID, "transcript").text}


async def test_an_operator_forks_a_what_if_that_answers_the_runs_call_from_its_record_and_runs_no_tool(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, browser: Any
) -> None:
    delete_a = tool_use("toolu_A", "delete_file", {"path": "/tmp/a"})
    fake_api.script(
        Reply([delete_a], "tool_use"),
        end_turn("Deleted /tmp/a."),
        Reply([delete_a, tool_use("toolu_B", "delete_file", {"path": "/tmp/b"})], "tool_use"),
        end_turn(FINAL),
    )
    async with worker(delete_file):
        run = await runner.start(model="claude-fake-1", max_tokens=1024, messages=[USER], tools=[delete_file])
        await run.until_done()
        async with serving(runner) as url:
            seen = await asyncio.to_thread(fork_what_if, browser, url, run.id)
    fork_id = seen["address"].rsplit("/runs/", 1)[1]
    assert fork_id != run.id
    assert "deleted /tmp/a" in seen["transcript"]
    assert "Error: Tool 'delete_file' was not run" in seen["transcript"]
    assert CALLS == ["delete /tmp/a"]  # the run's own call: the what-if ran none
    assert [body["model"] for body in fake_api.bodies()] == ["claude-fake-1"] * 2 + ["claude-fake-2"] * 2
