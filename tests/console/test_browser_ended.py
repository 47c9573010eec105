"""An ended run's page in a real browser: a run terminated while one tool call waited for approval and another had
completed shows the completed call's result and names the call that had not, with no worker running."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from anthropic import beta_async_tool

from agent_runner.client import AgentRunner
from agent_runner.console import serving
from agent_runner.contract.events import ToolFinished
from agent_runner.testing import FakeMessagesAPI, Reply, text, tool_use
from tests.conftest import WorkerFactory
from tests.steering_support import CALLS, delete_file, wait_status

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_tools")]

USER = {"role": "user", "content": "Report on the disk, then clean /tmp."}


@beta_async_tool
async def disk_report(topic: str) -> str:
    """A short report.

    Args:
        topic: The topic.
    """
    return f"{topic}: 42% used"


def read_page(driver: Any, url: str) -> dict[str, str]:
    """The page's conversation and its note on the calls that had not completed, once they are shown."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(driver, 30, poll_frequency=0.05)
    driver.get(url)
    wait.until(lambda d: d.find_elements(By.ID, "unfinished"))
    return {
        "status": driver.find_element(By.CSS_SELECTOR, "#run-head .badge").text,
        "transcript": driver.find_element(By.ID, "transcript").text,
        "unfinished": driver.find_element(By.ID, "unfinished").text,
    }


async def test_a_terminated_runs_page_shows_the_results_it_had_and_the_calls_that_had_not_completed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, browser: Any
) -> None:
    fake_api.script(
        Reply(
            [
                text("Reporting, then cleaning."),
                tool_use("toolu_D", "delete_file", {"path": "/tmp"}),
                tool_use("toolu_R", "disk_report", {"topic": "disk"}),
            ],
            "tool_use",
        )
    )
    async with worker(delete_file, disk_report):
        run = await runner.start(
            model="claude-fake-1",
            max_tokens=1024,
            messages=[USER],
            tools=[delete_file, disk_report],
            approval={"tools": ["delete_file"]},
        )
        await wait_status(run, "waiting_for_approval")
        async with asyncio.timeout(20):
            async for event in run.events(agents=False):
                if isinstance(event, ToolFinished) and event.tool_use_id == "toolu_R":
                    break
    await run.terminate("runaway")
    async with serving(runner) as url:
        seen = await asyncio.to_thread(read_page, browser, f"{url}/runs/{run.id}")
    assert seen["status"] == "terminated"
    assert "disk: 42% used" in seen["transcript"]
    assert seen["unfinished"] == "The run ended before these tool calls completed: delete_file (toolu_D)."
    assert CALLS == []
