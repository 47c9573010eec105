"""A run asking for more budget, answered from its page in a real browser: the request shows Claude's summary turn's
note and offers twice the spent limits; one click on Approve goes on with them, and the run completes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent_runner.client import AgentRunner
from agent_runner.console import serving
from agent_runner.testing import FakeMessagesAPI, end_turn
from tests.conftest import WorkerFactory
from tests.steering_support import wait_status
from tests.test_budget_requests import ASK, BASE, NOTE, call, summary
from tests.tools_for_tests import get_weather

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("fresh_tools")]

FINAL = "Lima and Kyiv: sunny."


def approve_more(driver: Any, url: str, run_id: str) -> dict[str, str]:
    """What an operator does in the page (Selenium is synchronous: this runs in a thread beside the event loop)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    wait = WebDriverWait(driver, 30, poll_frequency=0.05)
    driver.get(f"{url}/runs/{run_id}")
    request = '.approval[data-tool-use-id="budget_1"]'
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, request))
    shown = {
        "note": driver.find_element(By.CSS_SELECTOR, f"{request} .note").text,
        "offered": driver.find_element(By.CSS_SELECTOR, f"{request} .approval-input").get_attribute("value") or "",
    }
    driver.find_element(By.CSS_SELECTOR, f"{request} .approve").click()
    wait.until(lambda d: FINAL in d.find_element(By.ID, "transcript").text)
    return shown


async def test_an_operator_approves_the_offered_limits_and_the_run_goes_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, browser: Any
) -> None:
    fake_api.script(call(1), call(2), call(3), summary(), end_turn(FINAL))
    async with worker(get_weather):
        run = await runner.start(**BASE, tools=[get_weather], budget=ASK)
        await wait_status(run, "waiting_for_approval", iterations=4)
        async with serving(runner) as url:
            shown = await asyncio.to_thread(approve_more, browser, url, run.id)
        result = await run.result()
    assert shown == {"note": NOTE, "offered": '{\n  "max_output_tokens": 50\n}'}
    assert (result.status, result.iterations) == ("completed", 5)
    assert fake_api.bodies()[4]["messages"][-1]["content"][0]["text"] == (
        "A person raised the budget. Budget left for this task: 15 of 50 output tokens. Pace your work to finish "
        "within it. Go on with the task."
    )
