"""The SDK's runnable toolsets in a run: registered on a worker, each action one activity, the SDK's semantics kept.

The backend is a toolset of ours that records the actions it ran (``RecordingBrowser``), so a test can say exactly
which actions ran, in which order, and which did not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.tools import ToolError
from anthropic.lib.tools._toolsets._runnable import (
    BetaAsyncRunnableToolset,
    BetaRunnableToolset,
    BetaToolsetCallContext,
    BetaToolsetContent,
)
from temporalio.client import Client
from temporalio.worker import Worker

from agent_runner.activities.claude import ClaudeActivities
from agent_runner.activities.tools import ToolCall, ToolRegistry
from agent_runner.activities.toolsets import toolset_options
from agent_runner.client import AgentRunner, Run
from agent_runner.contract.errors import EditRejected, ToolRegistrationError
from agent_runner.contract.events import ToolFinished, ToolStarted
from agent_runner.contract.steering import EDIT_OUTCOME_QUERY
from agent_runner.contract.toolsets import RECONCILE_TOOLSET_ACTION_ACTIVITY, RUN_TOOLSET_ACTION_ACTIVITY
from agent_runner.contract.types import ActivityOptions
from agent_runner.plugin import AgentRunnerPlugin
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.workflows import tool_calls
from tests.conftest import WorkerFactory, anthropic_client_factory
from tests.heartbeat_support import Heartbeats
from tests.steering_support import wait_status
from tests.test_durability import wait_for, worker_process
from tests.test_loop import AlwaysFails
from tests.test_tool_effects import FailingBigPuts
from tests.tools_for_tests import get_time
from tests.toolsets_for_tests import browser as marking_browser

BASE: dict[str, Any] = {
    "model": "claude-fake-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Open the docs and take a screenshot."}],
}


class RecordingBrowser(BetaAsyncRunnableToolset):
    """A browser toolset that records each action; ``fail`` raises the SDK's ``ToolError``, ``crash`` a bug, ``wait``
    waits for ``opened``."""

    toolset_name = "browser"

    def __init__(self) -> None:
        self.actions: list[tuple[str, dict[str, object], str | None]] = []
        self.opened = asyncio.Event()

    def to_dict(self) -> Any:
        return {"type": "browser_toolset_20260801"}

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        self.actions.append((name, dict(input), context.tool_use.id if context.tool_use else None))
        if name == "fail":
            raise ToolError("The page did not load.")
        if name == "crash":
            raise KeyError("tab")
        if name == "wait":
            await self.opened.wait()
        return f"{name} done"


class RecordingComputer(BetaRunnableToolset):
    """A synchronous computer toolset (runs in a thread on the worker)."""

    toolset_name = "computer"

    def __init__(self) -> None:
        self.actions: list[str] = []

    def to_dict(self) -> Any:
        return {"type": "computer_toolset_20260801"}

    def call(self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]) -> str | BetaToolsetContent:
        assert context.tool_use is not None and context.tool_use.input == input  # the SDK's context, built as it does
        self.actions.append(name)
        if name == "fail":
            raise ToolError("No display.")
        return [{"type": "text", "text": f"{name} ok"}]


def action(id: str, toolset: str, name: str, input: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: A002
    return {**tool_use(id, name, input or {}), "toolset_name": toolset}


def result(id: str, toolset: str, content: Any, error: bool = False) -> dict[str, Any]:  # noqa: A002
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": id, "toolset_name": toolset, "content": content}
    if error:
        block["is_error"] = True
    return block


def results_sent(fake: FakeMessagesAPI) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = fake.bodies()[1]["messages"][-1]["content"]
    return content


async def results_watched(run: Run) -> list[dict[str, Any]]:
    """The ``tool_result`` blocks of the run's first turn as watchers saw them (``tool_finished``), in block order.

    Each action is also a ``tool_started`` event before it, as a tool call is.
    """
    watched = [event async for event in run.events(agents=False) if event.iteration == 1]
    started = [event.tool_use_id for event in watched if isinstance(event, ToolStarted)]
    finished = {event.tool_use_id: event.result for event in watched if isinstance(event, ToolFinished)}
    assert sorted(started) == sorted(finished)
    return [finished[tool_use_id] for tool_use_id in sorted(finished)]


async def test_each_action_runs_on_the_worker_and_results_echo_the_toolset(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    browser, computer = RecordingBrowser(), RecordingComputer()
    fake_api.script(
        Reply(
            [
                text("On it."),
                action("toolu_1", "browser", "navigate", {"url": "https://docs.example"}),
                action("toolu_2", "computer", "screenshot"),
                action("toolu_3", "browser", "screenshot"),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(browser, computer):
        run = await runner.start(**BASE, tools=["browser", "computer"])
        assert (await run.result()).status == "completed"
        watched = await results_watched(run)
    assert fake_api.bodies()[0]["tools"] == [
        {"type": "browser_toolset_20260801"},
        {"type": "computer_toolset_20260801"},
    ]
    assert browser.actions == [
        ("navigate", {"url": "https://docs.example"}, "toolu_1"),
        ("screenshot", {}, "toolu_3"),
    ]
    assert computer.actions == ["screenshot"]
    assert results_sent(fake_api) == [
        result("toolu_1", "browser", "navigate done"),
        result("toolu_2", "computer", [{"type": "text", "text": "screenshot ok"}]),
        result("toolu_3", "browser", "screenshot done"),
    ]
    assert watched == results_sent(fake_api)


async def test_an_action_named_like_a_tool_is_the_toolset_s_even_with_eager_tools(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A toolset's action block carries its ``toolset_name``: the action goes to the toolset, never to a registered
    tool of the same name, however early its block streams."""
    browser = RecordingBrowser()
    fake_api.script(
        Reply([action("toolu_1", "browser", "get_time", {"city": "Paris"}), text("x" * 200)], "tool_use"),
        end_turn("Done."),
    )
    async with worker(browser, get_time):
        run = await runner.start(**BASE, tools=["browser", get_time], eager_tools=True)
        assert (await run.result()).status == "completed"
    assert browser.actions == [("get_time", {"city": "Paris"}, "toolu_1")]
    assert results_sent(fake_api) == [result("toolu_1", "browser", "get_time done")]


@pytest.mark.parametrize("eager", [False, True], ids=["", "eager_tools"])
async def test_after_a_failing_action_the_later_actions_of_its_toolset_are_not_executed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, eager: bool
) -> None:
    """With ``eager_tools`` too: a toolset's actions start with the reply, in order, never as their blocks stream."""
    browser, computer = RecordingBrowser(), RecordingComputer()
    fake_api.script(
        Reply(
            [
                action("toolu_1", "browser", "navigate"),
                action("toolu_2", "browser", "fail"),
                action("toolu_3", "computer", "fail"),
                action("toolu_4", "browser", "click"),
                action("toolu_5", "computer", "type"),
            ],
            "tool_use",
        ),
        Reply([action("toolu_6", "browser", "click")], "tool_use"),
        end_turn("Done."),
    )
    async with worker(browser, computer):
        run = await runner.start(**BASE, tools=["browser", "computer"], eager_tools=eager)
        assert (await run.result()).status == "completed"
        watched = await results_watched(run)
    # The later actions never reached the toolsets; a new turn starts afresh.
    assert [name for name, _, _ in browser.actions] == ["navigate", "fail", "click"]
    assert computer.actions == ["fail"]
    assert results_sent(fake_api) == [
        result("toolu_1", "browser", "navigate done"),
        result("toolu_2", "browser", "The page did not load.", error=True),
        result("toolu_3", "computer", "No display.", error=True),
        result("toolu_4", "browser", "Not executed: an earlier action in this turn failed.", error=True),
        result("toolu_5", "computer", "Not executed: an earlier computer action in this turn failed.", error=True),
    ]
    assert watched == results_sent(fake_api)  # failures and actions not run included
    assert fake_api.bodies()[2]["messages"][-1]["content"] == [result("toolu_6", "browser", "click done")]


async def test_a_stop_while_an_action_runs_leaves_the_later_actions_of_its_turn_unrun(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The SDK's ``close``: a reply's calls that have not started never run, and Claude's last turn says why."""
    browser = RecordingBrowser()
    fake_api.script(Reply([action("toolu_1", "browser", "wait"), action("toolu_2", "browser", "click")], "tool_use"))
    async with worker(browser):
        run = await runner.start(**BASE, tools=["browser"])
        await wait_for(lambda: bool(browser.actions), "the first action")
        await run.stop("Enough.")
        browser.opened.set()
        ended = await run.result()
        transcript = await run.transcript()
    assert [name for name, _, _ in browser.actions] == ["wait"]
    assert (ended.status, ended.detail) == ("stopped", "Enough.")
    assert transcript[-1] == {
        "role": "user",
        "content": [
            result("toolu_1", "browser", "wait done"),
            result("toolu_2", "browser", "The run was stopped before this call was executed.", error=True),
        ],
    }


class StuckVault(BetaAsyncRunnableToolset):
    """An at-most-once toolset whose ``pay`` never finishes within its 1 s timeout."""

    toolset_name = "vault"

    def __init__(self) -> None:
        self.actions: list[str] = []

    def to_dict(self) -> Any:
        return {"type": "vault_toolset_20260801"}

    async def call(
        self,
        context: BetaToolsetCallContext,  # noqa: ARG002
        name: str,
        input: Mapping[str, object],  # noqa: A002
    ) -> str | BetaToolsetContent:
        self.actions.append(f"{name} {input.get('amount')}")
        await asyncio.sleep(30)
        return "paid"


class SlowScanner(BetaRunnableToolset):
    """A synchronous toolset whose ``scan`` takes 3 s, past its 1 s timeout."""

    toolset_name = "scanner"

    def __init__(self) -> None:
        self.actions: list[str] = []

    def to_dict(self) -> Any:
        return {"type": "scanner_toolset_20260801"}

    def call(
        self,
        context: BetaToolsetCallContext,  # noqa: ARG002
        name: str,
        input: Mapping[str, object],  # noqa: A002, ARG002
    ) -> str | BetaToolsetContent:
        self.actions.append(f"{name} start")
        time.sleep(3)
        self.actions.append(f"{name} end")
        return "scanned"


ONE_SECOND = ActivityOptions(start_to_close_timeout=timedelta(seconds=1))


def _not_reached(call: ToolCall) -> None:
    raise AssertionError(f"the reconcile of {call.name} never runs: its activity fails before")


async def test_an_async_action_past_its_timeout_is_cancelled_by_its_worker_and_an_at_most_once_one_is_unknown(
    client: Client, runner: AgentRunner, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker enforces an action's own timeout, as a tool's, and says so; the action is not run again. Its
    reconcile activity failing on its worker is tried a bounded number of times, then Claude is told why."""
    quick = {"initial_interval": timedelta(milliseconds=10), "maximum_interval": timedelta(milliseconds=20)}
    monkeypatch.setattr(tool_calls, "RECONCILE_RETRY", dataclasses.replace(tool_calls.RECONCILE_RETRY, **quick))
    failing = AlwaysFails(RECONCILE_TOOLSET_ACTION_ACTIVITY)
    vault = StuckVault()
    fake_api.script(Reply([action("toolu_1", "vault", "pay", {"amount": 5})], "tool_use"), end_turn("Unsure."))
    plugin = AgentRunnerPlugin(
        tools=[toolset_options(vault, options=ONE_SECOND, effects="at_most_once", reconcile=_not_reached)],
        claude=ClaudeActivities(anthropic_client_factory(fake_api)),
    )
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[failing]):
        run = await runner.start(**BASE, tools=["vault"])
        assert (await run.result()).status == "completed"
    assert failing.attempts == [1, 2, 3, 4, 5]
    assert vault.actions == ["pay 5"]
    assert results_sent(fake_api) == [
        result(
            "toolu_1",
            "vault",
            "Error: The outcome of this call of 'vault' is unknown: Action 'vault/pay' did not finish within 1 s; "
            "it was cancelled; reconciling failed: the content store is unreachable. It may or may not have taken "
            "effect, and it was not run again. Check before calling it again.",
            error=True,
        )
    ]


async def test_a_sync_action_past_its_timeout_never_runs_beside_its_own_retry(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Its thread cannot be stopped: the worker reports the timeout as the action's result rather than let Temporal
    retry it while the thread goes on."""
    scanner = SlowScanner()
    fake_api.script(Reply([action("toolu_1", "scanner", "scan")], "tool_use"), end_turn("Too slow."))
    async with worker(toolset_options(scanner, options=ONE_SECOND)):
        run = await runner.start(**BASE, tools=["scanner"])
        assert (await run.result()).status == "completed"
        await asyncio.sleep(2.5)  # the thread's own end, past the run's: nothing started after it
    assert scanner.actions == ["scan start", "scan end"]
    assert results_sent(fake_api) == [
        result(
            "toolu_1",
            "scanner",
            "Error: Action 'scanner/scan' did not finish within 1 s. It may still be running, so it was not run again.",
            error=True,
        )
    ]


async def test_an_unexpected_exception_is_an_error_result_as_in_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    browser = RecordingBrowser()
    fake_api.script(
        Reply([action("toolu_1", "browser", "crash"), action("toolu_2", "browser", "click")], "tool_use"),
        end_turn("Done."),
    )
    async with worker(browser):
        run = await runner.start(**BASE, tools=["browser"])
        assert (await run.result()).status == "completed"
    assert results_sent(fake_api) == [
        result("toolu_1", "browser", "KeyError('tab')", error=True),
        result("toolu_2", "browser", "Not executed: an earlier action in this turn failed.", error=True),
    ]


async def test_a_toolset_the_run_does_not_have_is_not_found(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    # Not found is no failure of the toolset: the SDK runs (and answers) the family's later actions all the same.
    fake_api.script(
        Reply([action("toolu_1", "computer", "click"), action("toolu_2", "computer", "type")], "tool_use"),
        end_turn("Done."),
    )
    async with worker(RecordingBrowser()):
        run = await runner.start(**BASE, tools=["browser"])
        assert (await run.result()).status == "completed"
        watched = await results_watched(run)
    assert results_sent(fake_api) == [
        result("toolu_1", "computer", "Error: Toolset 'computer' member 'click' not found", error=True),
        result("toolu_2", "computer", "Error: Toolset 'computer' member 'type' not found", error=True),
    ]
    assert watched == results_sent(fake_api)


async def test_a_runs_toolsets_are_fixed_as_a_tool_runners_are(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As the SDK's ``ToolsetsFixedError``: no edit adds a run's toolset again, replaces it or takes it away."""
    fake_api.script(end_turn("Done."))
    async with worker(RecordingBrowser()):
        run = await runner.start(**BASE, tools=["browser"], step=True)
        await wait_status(run, "waiting_for_step", 1)
        refused = {
            "add_tools can't add the 'browser' toolset: the run has it": run.add_tools("browser"),
            "add_tools can't replace the 'browser' toolset": run.add_tools({"type": "browser_toolset_20260801"}),
            "add_tools can't add a tool named 'browser'": run.add_tools({"name": "browser", "input_schema": {}}),
            "remove_tools can't remove the 'browser' toolset": run.remove_tools("browser"),
        }
        for message, edit in refused.items():
            with pytest.raises(EditRejected, match=message):
                await edit
        await run.advance()
        assert (await run.result()).status == "completed"
    assert len(fake_api.bodies()) == 1


async def test_add_tools_naming_a_registered_toolset_fails_at_the_boundary(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A toolset the run does not have is known as one once the workers describe it: the edit fails then, the run
    goes on without it, and its history says nothing of it."""
    fake_api.script(Reply([tool_use("toolu_1", "get_time", {"city": "Oslo"})], "tool_use"), end_turn("Done."))
    async with worker(RecordingBrowser(), get_time):
        run = await runner.start(**BASE, tools=[get_time], step=True, betas=["inline-tools-2026-09-15"])
        await wait_status(run, "waiting_for_step", 1)
        await run.add_tools("browser")  # accepted and queued (step mode does not wait): it applies at the boundary
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        outcome = await run.handle.query(EDIT_OUTCOME_QUERY, 1)  # the first edit
        await run.advance()
        assert (await run.result()).status == "completed"
    assert outcome["error"] == (
        "add_tools can't add the 'browser' toolset: a run's toolsets are fixed when it starts; start a new run with "
        "the toolsets it needs."
    )
    # The next turn continues the thread with the tool's result alone: no tool_addition.
    assert [m["role"] for m in fake_api.bodies()[1]["messages"]] == ["user"]


async def test_a_toolset_that_requires_confirmation_waits_for_the_runs_approval(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    browser = toolset_options(RecordingBrowser(), requires_approval=True)
    assert isinstance(browser, RecordingBrowser)
    fake_api.script(
        Reply(
            [
                action("toolu_1", "browser", "navigate", {"url": "https://a.example"}),
                action("toolu_2", "browser", "click"),
                action("toolu_3", "browser", "type"),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(browser):
        run = await runner.start(**BASE, tools=["browser"])
        await wait_status(run, "waiting_for_approval")
        assert [a["tool_use_id"] for a in (await run.status()).pending_approvals] == ["toolu_1"]
        assert browser.actions == []
        await run.approve("toolu_1", input={"url": "https://b.example"})
        await _wait_pending(run, "toolu_2")
        await run.deny("toolu_2", "Not that button.")
        assert (await run.result()).status == "completed"
    assert browser.actions == [("navigate", {"url": "https://b.example"}, "toolu_1")]
    assert results_sent(fake_api) == [
        result("toolu_1", "browser", "navigate done"),
        result("toolu_2", "browser", "Not that button.", error=True),
        result("toolu_3", "browser", "Not executed: an earlier action in this turn failed.", error=True),
    ]


async def _wait_pending(run: Run, tool_use_id: str) -> None:
    async with asyncio.timeout(20):
        while [a["tool_use_id"] for a in (await run.status()).pending_approvals] != [tool_use_id]:
            await asyncio.sleep(0.05)


def test_a_worker_registers_toolsets_by_family_and_refuses_two_of_one_family() -> None:
    registry = ToolRegistry(toolsets=[RecordingBrowser()])
    assert registry.names == ["browser"]
    spec = registry.spec("browser")
    assert spec is not None
    assert (spec.name, spec.definition) == ("browser", {"type": "browser_toolset_20260801"})
    assert not spec.requires_approval
    with pytest.raises(ToolRegistrationError, match="Two tools or toolsets are named 'browser'"):
        registry.add(RecordingBrowser())


def test_toolset_options_take_a_tools_effect_choices_and_refuse_contradictions() -> None:
    def never(call: object) -> None:
        assert call is not None  # never called here

    spec = ToolRegistry(toolsets=[toolset_options(RecordingBrowser(), effects="at_most_once")]).spec("browser")
    assert spec is not None and (spec.effects, spec.on_unknown) == ("at_most_once", "tell")
    reconciled = toolset_options(RecordingBrowser(), effects="at_most_once", reconcile=never)
    spec = ToolRegistry(toolsets=[reconciled]).spec("browser")
    assert spec is not None and (spec.effects, spec.on_unknown) == ("at_most_once", "reconcile")
    spec = ToolRegistry(toolsets=[RecordingBrowser()]).spec("browser")
    assert spec is not None and (spec.effects, spec.on_unknown) == ("idempotent", "tell")
    with pytest.raises(ToolRegistrationError) as refused:
        toolset_options(RecordingBrowser(), reconcile=never)
    assert str(refused.value) == (
        "toolset_options(on_unknown=..., reconcile=...) applies to effects='at_most_once' only: an idempotent tool is "
        "simply retried."
    )
    with pytest.raises(ToolRegistrationError) as refused:
        toolset_options(RecordingBrowser(), effects="at_most_once", on_unknown="reconcile")
    assert str(refused.value) == "toolset_options(on_unknown='reconcile') needs reconcile=<function>."


class ScreenshotComputer(BetaAsyncRunnableToolset):
    """A computer whose screenshot is a big image block, as a real one's is."""

    toolset_name = "computer"
    image = "iVBORw0KGgo" + "A" * 200_000

    def to_dict(self) -> Any:
        return {"type": "computer_toolset_20260801"}

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        assert (context.tool_use is not None, name, dict(input)) == (True, "screenshot", {})
        return [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": self.image}}]


async def test_a_big_screenshot_is_stored_apart_and_sent_whole(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([action("toolu_1", "computer", "screenshot")], "tool_use"), end_turn("I see it."))
    async with worker(ScreenshotComputer()):
        run = await runner.start(**BASE, tools=["computer"])
        assert (await run.result()).status == "completed"
        history = await run.handle.fetch_history()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ScreenshotComputer.image}}
    assert results_sent(fake_api) == [result("toolu_1", "computer", [image])]
    assert ScreenshotComputer.image not in history.to_json()  # the history carries a reference, not the image


class CountingScreenshotComputer(ScreenshotComputer):
    """Counts its screenshots: an action whose result cannot be stored must not be run again."""

    taken = 0

    async def call(
        self, context: BetaToolsetCallContext, name: str, input: Mapping[str, object]
    ) -> str | BetaToolsetContent:
        CountingScreenshotComputer.taken += 1
        return await super().call(context, name, input)


@pytest.mark.slow
async def test_an_action_whose_result_the_store_cannot_take_is_an_error_result_and_ran_once(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """As for a tool (``activities/tools.py`` ``offloaded``): five tries in the one attempt, then Claude is told."""
    store, CountingScreenshotComputer.taken = FailingBigPuts(), 0
    fake_api.script(Reply([action("toolu_1", "computer", "screenshot")], "tool_use"), end_turn("It is lost."))
    async with worker(CountingScreenshotComputer(), store=store):
        run = await runner.start(**BASE, tools=["computer"])
        assert (await run.result()).status == "completed"
    assert (CountingScreenshotComputer.taken, store.puts) == (1, 5)
    lost = "Error: Action 'computer/screenshot' ran, but its result could not be stored (OSError('disk full')). It "
    assert results_sent(fake_api) == [result("toolu_1", "computer", lost + "was not run again.", error=True)]


def test_a_tools_module_registers_the_toolsets_it_defines(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_browser_tools.py").write_text(
        "from tests.test_toolsets import RecordingBrowser\n\nbrowser = RecordingBrowser()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = ToolRegistry()
    assert registry.add_module("my_browser_tools") == ["browser"]
    assert registry.names == ["browser"]


async def test_a_call_named_after_a_toolset_without_toolset_name_is_malformed_as_in_the_sdk(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    browser = RecordingBrowser()
    fake_api.script(
        Reply(
            [
                tool_use("toolu_1", "browser", {"actions": [{"action": "navigate"}, {"action": "click"}]}),
                action("toolu_2", "browser", "click"),
            ],
            "tool_use",
        ),
        end_turn("Done."),
    )
    async with worker(browser):
        run = await runner.start(**BASE, tools=["browser"])
        assert (await run.result()).status == "completed"
        watched = await results_watched(run)
    assert browser.actions == []
    assert results_sent(fake_api) == [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "Error: the 'browser' toolset could not run this call: its actions could not be run as sent "
            "(actions: 'navigate', 'click'); nothing in the batch was executed",
            "is_error": True,
        },
        result("toolu_2", "browser", "Not executed: an earlier action in this turn failed.", error=True),
    ]
    assert watched == results_sent(fake_api)


@pytest.mark.slow
async def test_a_worker_killed_mid_action_leaves_the_action_to_another_worker(
    runner: AgentRunner, temporal_address: str, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """``python worker.py --tools tests.toolsets_for_tests``, killed with ``-9`` while an action runs: the next worker
    runs that action again (it is idempotent by default), then the later one, and Claude gets an uninterrupted run's
    results."""
    fake_api.script(
        Reply([action("toolu_1", "browser", "wait"), action("toolu_2", "browser", "click", {"x": 1})], "tool_use"),
        end_turn("Done."),
    )
    marks, log = tmp_path / "marks.txt", tmp_path / "worker.log"
    args = ("--tools", "tests.toolsets_for_tests")
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log, *args) as first:
        run = await runner.start(**BASE, tools=["browser"])
        await wait_for(lambda: marks.exists() and "start wait" in marks.read_text(), "the action starting")
        first.send_signal(signal.SIGKILL)
        first.wait()
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log, *args):
        assert (await run.result()).status == "completed"
    assert marks.read_text().splitlines() == ["start wait toolu_1", "start wait toolu_1", "start click toolu_2"]
    assert results_sent(fake_api) == [
        result("toolu_1", "browser", "wait done {}"),
        result("toolu_2", "browser", "click done {'x': 1}"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("toolset", "expected"),
    [
        (
            "till",
            {
                "is_error": True,
                "content": "Error: The outcome of this call of 'till' is unknown: activity Heartbeat timeout. It may "
                "or may not have taken effect, and it was not run again. Check before calling it again.",
            },
        ),
        ("ledger", {"content": "already paid 42 (found by reconcile)"}),
    ],
)
async def test_a_worker_killed_mid_action_never_runs_an_at_most_once_action_twice(
    toolset: str,
    expected: dict[str, Any],
    runner: AgentRunner,
    temporal_address: str,
    fake_api: FakeMessagesAPI,
    tmp_path: Path,
) -> None:
    """``toolset_options(..., effects="at_most_once")``: the action is not run again on the next worker; its outcome
    is unknown, then told to Claude or reconciled, and the later action of the turn runs only after a success."""
    fake_api.script(
        Reply(
            [action("toolu_1", toolset, "pay", {"amount": 42}), action("toolu_2", toolset, "pay", {"amount": 7})],
            "tool_use",
        ),
        end_turn("Done."),
    )
    effects, marks, log = tmp_path / "effects.txt", tmp_path / "marks.txt", tmp_path / "worker.log"
    args = ("--tools", "tests.toolsets_for_tests")
    env = {"AGENT_RUNNER_TEST_EFFECTS": str(effects), "AGENT_RUNNER_TEST_SLOW_SECONDS": "30"}
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log, *args, env=env) as first:
        run = await runner.start(**BASE, tools=[toolset])
        await wait_for(lambda: effects.exists() and "paid " in effects.read_text(), "the payment")
        first.send_signal(signal.SIGKILL)
        first.wait()
    env["AGENT_RUNNER_TEST_SLOW_SECONDS"] = "0"
    with worker_process(temporal_address, runner.task_queue, fake_api, marks, log, *args, env=env):
        assert (await run.result()).status == "completed"
    lines = effects.read_text().splitlines()
    first_key = lines[0].split()[1]
    assert lines[:2] == [f"start {first_key}", f"paid {first_key} 42"]  # the lost action, once, never again
    if toolset == "till":  # told: a failure, so the later action of the turn is not run
        assert len(lines) == 2
        second = result("toolu_2", toolset, "Not executed: an earlier action in this turn failed.", error=True)
    else:  # reconciled: a success, so the later action runs
        assert lines[2:] == [lines[2], f"paid {lines[2].split()[1]} 7"]
        second = result("toolu_2", toolset, "paid 7")
    assert results_sent(fake_api) == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "toolset_name": toolset, **expected},
        second,
    ]


async def test_an_action_its_worker_began_late_heartbeats_at_once_and_runs_once(
    runner: AgentRunner,
    client: Client,
    fake_api: FakeMessagesAPI,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An action's heartbeat timeout (the toolset's 2 s) runs from the attempt's start on the server: an action a
    busy worker began 1.2 s late heartbeats as it begins, not a second later (past the timeout, and run again)."""
    marks = tmp_path / "marks"
    monkeypatch.setenv("AGENT_RUNNER_TEST_MARKS", str(marks))
    monkeypatch.setenv("AGENT_RUNNER_TEST_SLOW_SECONDS", "2")
    log = Heartbeats(RUN_TOOLSET_ACTION_ACTIVITY, begin_late=1.2)
    fake_api.script(Reply([action("toolu_1", "browser", "wait")], "tool_use"), end_turn("ok"))
    plugin = AgentRunnerPlugin(tools=[marking_browser], claude=ClaudeActivities(anthropic_client_factory(fake_api)))
    async with Worker(client, task_queue=runner.task_queue, plugins=[plugin], interceptors=[log]):
        await (await runner.start(**BASE, tools=["browser"])).until_done()
    ((_, *beats),) = log.beats
    assert 1.2 <= beats[0] < 1.6, beats
    assert marks.read_text().splitlines() == ["start wait toolu_1"]
    assert results_sent(fake_api) == [result("toolu_1", "browser", "wait done {}")]
