"""No input can wedge a run: bad input is refused at the door, bad signals are dropped, bad replies fail clearly.

A workflow task that raises is retried by Temporal for ever, so the run neither progresses nor ends. Each test sends
what a careless or hostile client, tool or API could send, and checks that the run either goes on unharmed or ends
at once with a clear error: judged by how the run ended, what Claude received and which tools ran.
"""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import pytest
from anthropic import beta_tool
from temporalio.client import Client, WorkflowFailureError
from temporalio.workflow import _Definition

from agent_runner import cli
from agent_runner.client import AgentRunner
from agent_runner.contract.errors import EditRejected, InvalidRunInput, MalformedReply
from agent_runner.contract.types import TOOL_USE_READY_SIGNAL
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from agent_runner.tuning import WorkerTuning
from agent_runner.workflows.agent_run import AgentRun
from tests.conftest import WorkerFactory, stock_start, stock_temporal
from tests.steering_support import wait_status

BASE = {"model": "claude-fake-1", "max_tokens": 256}
USER = {"role": "user", "content": "Hi."}
RAN: list[str] = []


@beta_tool
def launch(target: str) -> str:
    """Launch something: a side effect nobody asked for must never happen.

    Args:
        target: What to launch.
    """
    RAN.append(target)
    return f"launched {target}"


@pytest.fixture(autouse=True)
def forget_launches() -> None:
    RAN.clear()


async def wait_for_request(fake: FakeMessagesAPI, count: int) -> None:
    async with asyncio.timeout(20):
        while len(fake.requests) < count:
            await asyncio.sleep(0.02)


async def failure_of(
    client: Client, worker: WorkerFactory, workflow_id: str, start: Callable[[], object]
) -> tuple[str | None, str | None]:
    """Start a run with ``start`` (the stock CLI, in a thread) and wait for it to fail: its cause's type and message."""
    async with worker(launch):
        await asyncio.to_thread(start)
        async with asyncio.timeout(30):
            with pytest.raises(WorkflowFailureError) as failure:
                await client.get_workflow_handle(workflow_id).result()
    cause = failure.value.cause
    return getattr(cause, "type", None), getattr(cause, "message", None)


FORGED: list[Any] = [
    {"iteration": "one", "attempt": "x", "block": 5},  # malformed fields
    "not even an object",
    None,
    {"iteration": 1, "attempt": 1, "block": {"type": "tool_use", "id": "toolu_evil", "name": "launch", "input": {}}},
    {
        "iteration": 1,
        "attempt": 1,
        "token": "guessed",
        "block": {"type": "tool_use", "id": "toolu_evil", "name": "launch", "input": {"target": "moon"}},
    },
]


@pytest.mark.parametrize("eager", [False, True], ids=["eager-off", "eager-on"])
async def test_forged_or_malformed_tool_use_ready_signals_neither_wedge_the_run_nor_run_a_tool(
    eager: bool, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    replied = threading.Event()
    fake_api.script(Reply(content=[text("Thinking.")], until=replied), end_turn("unused"))
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], eager_tools=eager, thread=False)
        try:
            await wait_for_request(fake_api, 1)  # the model call is under way (its reply held): iteration 1, attempt 1
            for payload in FORGED:
                await run.handle.signal(TOOL_USE_READY_SIGNAL, payload)
        finally:
            replied.set()
        async with asyncio.timeout(30):
            result = await run.result()
    assert (result.status, result.iterations) == ("completed", 1)
    assert RAN == []
    assert len(fake_api.requests) == 1


async def test_an_eager_tool_started_from_a_block_the_reply_does_not_hold_whole_is_run_again_from_the_reply(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The reply's own block decides: a started call whose input differs from the reply's is never sent back."""
    fake_api.script(
        Reply(content=[text("Go."), tool_use("toolu_1", "launch", {"target": "mars"})], stop_reason="tool_use"),
        end_turn("Done."),
    )
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], eager_tools=True, thread=False)
        await run.until_done()
    assert RAN == ["mars"]  # started eagerly once, from the streamed block, which is the reply's
    assert fake_api.bodies()[1]["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched mars"}
    ]


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (
            Reply(content=[tool_use("toolu_1", "launch", [1, 2])], stop_reason="tool_use"),  # type: ignore[arg-type]
            "`content[0]` is a tool_use whose `input` is not an object",
        ),
        (
            Reply(content=[text("hi")], usage={"input_tokens": -3, "output_tokens": 5}),
            "`usage.input_tokens` is not a count",
        ),
    ],
    ids=["tool-input-not-object", "negative-usage"],
)
async def test_a_malformed_reply_fails_the_run_at_once_with_the_reason(
    reply: Reply, problem: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(reply)
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], thread=False)
        async with asyncio.timeout(30):
            with pytest.raises(MalformedReply) as failure:
                await run.until_done()
    assert str(failure.value) == (
        f"Claude's API sent a reply the runner cannot use: {problem}. If a proxy sits between the worker and the API "
        "(ANTHROPIC_BASE_URL), check it; then fork the run from its last turn."
    )
    assert len(fake_api.requests) == 1  # not retried: another attempt is billed and would get the same
    assert RAN == []


LATE_FALLBACK_PROBLEM = (
    "The run's input was rejected:\n- `refusal_fallbacks` entry 2 sets `bogus`, `temprature`, which is no Messages "
    "API parameter: an entry patches the run's parameters (a value sets one, null unsets it), as in "
    '{"model": "claude-opus-4-8", "thinking": null}.'
)
"""A check added after runs could start without it (``late_problems``): it refuses new runs only."""


@pytest.mark.parametrize(
    ("run_input", "expected"),
    [
        (None, "A run's input must be a JSON object with at least `model`, `max_tokens` and `messages`; got NoneType."),
        ("hello", "A run's input must be a JSON object with at least `model`, `max_tokens` and `messages`; got str."),
        ([1, 2], "A run's input must be a JSON object with at least `model`, `max_tokens` and `messages`; got list."),
        (
            {**BASE, "messages": [USER], "model_activity": {"initial_interval": "PT30S", "maximum_interval": "PT1S"}},
            "The run's input was rejected:\n- `model_activity` is invalid: value: Value error, maximum_interval "
            "(0:00:01) must be at least initial_interval (0:00:30)",
        ),
        (
            {**BASE, "max_tokens": 5, "messages": [USER], "tool_choice": {"type": "tool"}},
            "The run's input was rejected:\n- `tool_choice` is not what the Messages API takes "
            "(BetaToolChoiceAutoParam.type: Input should be 'auto'; BetaToolChoiceAnyParam.type: Input should be "
            "'any'; BetaToolChoiceToolParam.name: Field required; and 1 more). See the API reference for "
            "`tool_choice`.",
        ),
        (
            {**BASE, "messages": [USER], "tools": ["launch", "launch"]},
            "The run's input was rejected:\n- `tools[1]` is named `launch`, as `tools[0]` is; the API refuses two "
            "tools of one name. Leave one of them out.",
        ),
        (
            {**BASE, "messages": [USER], "tools": ["launch", {"name": "launch", "input_schema": {"type": "object"}}]},
            "The run's input was rejected:\n- `tools[1]` is named `launch`, as `tools[0]` is; the API refuses two "
            "tools of one name. Leave one of them out.",
        ),
        (
            {**BASE, "messages": [USER], "tools": [{"name": "x"}]},
            "The run's input was rejected:\n- `tools[0]` is a custom tool without an `input_schema`; the API refuses "
            'it. Give the JSON schema of its input, such as {"type": "object", "properties": {}}, or the `type` of a '
            "server tool.",
        ),
        (
            {**BASE, "messages": [USER], "tools": ["launch"], "tool_choice": {"type": "tool", "name": "nope"}},
            "The run's input was rejected:\n- `tool_choice` names the tool `nope`, which the run does not have (its "
            "tools are `launch`); the API refuses a request that forces a tool it was not given. Name one of its "
            'tools, or give {"type": "auto"}.',
        ),
        (
            {
                **BASE,
                "messages": [USER],
                "refusal_fallbacks": ["m2", {"model": "m3", "bogus": 1, "temprature": 0, "system": None}],
            },
            LATE_FALLBACK_PROBLEM,
        ),
    ],
    ids=[
        "no-input",
        "string",
        "list",
        "model-activity-out-of-range",
        "tool-choice-shape",
        "tool-twice",
        "registered-and-raw-of-one-name",
        "raw-without-input-schema",
        "tool-choice-names-no-tool",
        "fallback-entry-sets-what-an-entry-does-not-take",
    ],
)
async def test_bad_input_from_the_stock_cli_is_refused_at_once_as_invalid_run_input(
    run_input: Any, expected: str, client: Client, task_queue: str, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    workflow_id = f"bad-input-{task_queue}"
    start = functools.partial(stock_start, client, task_queue, workflow_id, run_input)
    assert await failure_of(client, worker, workflow_id, start) == ("InvalidRunInput", expected)
    assert fake_api.requests == []


DEEP = json.dumps({**BASE, "messages": [USER]})[:-1] + ', "metadata": ' + "[" * 300 + "]" * 300 + "}"
"""An input nested deeper than the data converter's JSON decoder goes (about 255 levels), and only 700 bytes long."""


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--input", DEEP],
            "The run's input cannot be read (Invalid JSON: recursion limit exceeded at line 1 column 309). Start the "
            "run with one JSON object (encoding `json/plain`) holding at least `model`, `max_tokens` and `messages`.",
        ),
        (
            ["--input", json.dumps({**BASE, "messages": [USER]}), "--input-meta", "encoding=json/protobuf"],
            "The run's input cannot be read (Payload at index 0 with encoding json/protobuf could not be converted). "
            "Start the run with one JSON object (encoding `json/plain`) holding at least `model`, `max_tokens` and "
            "`messages`.",
        ),
        (
            ["--input", json.dumps({**BASE, "messages": [USER]}), "--input", json.dumps({**BASE, "messages": [USER]})],
            "A run takes one input, a JSON object, and was started with 2: give it once (the stock CLI's `--input` or "
            "`--input-file`), as one object holding at least `model`, `max_tokens` and `messages`.",
        ),
        (
            ["--input", json.dumps({**BASE, "messages": [USER], "continued": {"conversation": 5}})],
            "`continued` is not the state a run hands its continuation (conversation: Input should be a valid "
            "dictionary or instance of Conversation; and 1 more): a run writes it when it continues as new; start "
            "the run without it.",
        ),
    ],
    ids=["nested-too-deep", "unknown-encoding", "two-inputs", "forged-continued"],
)
@pytest.mark.usefixtures("temporal_address")
async def test_input_no_converter_can_read_or_more_than_one_input_fails_the_run_at_once(
    args: list[str],
    expected: str,
    client: Client,
    task_queue: str,
    worker: WorkerFactory,
    fake_api: FakeMessagesAPI,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Temporal decodes a workflow's arguments before its code runs, and a failure there fails the workflow task, for
    ever: the run reads its own input, so these fail it at once with the reason instead, which the commands that read
    an ended run's history then show (they read its input too)."""
    workflow_id = f"unreadable-{task_queue}"
    command = ["workflow", "start", "--type", "AgentRun", "--task-queue", task_queue, "--workflow-id", workflow_id]
    start = functools.partial(stock_temporal, client, *command, *args)
    assert await failure_of(client, worker, workflow_id, start) == ("InvalidRunInput", expected)
    assert fake_api.requests == []
    capsys.readouterr()
    assert await cli.amain(["status", workflow_id, "--json", "--task-queue", task_queue]) == 0
    status = json.loads(capsys.readouterr().out)
    assert await cli.amain(["transcript", workflow_id, "--json", "--task-queue", task_queue]) == 0
    # Of two inputs, the commands read the first, as the run's input: its messages are what it was given.
    given = [USER] if args.count("--input") == 2 else []
    assert (status["status"], status["stop_reason_detail"], json.loads(capsys.readouterr().out)) == (
        "failed",
        expected,
        given,
    )


async def test_update_params_with_a_value_of_the_wrong_type_is_refused_and_the_run_goes_on(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    replied = threading.Event()
    fake_api.script(Reply(content=[text("One.")], until=replied), end_turn("unused"))
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], thread=False)
        try:
            await wait_for_request(fake_api, 1)  # the reply is held while the run is refused the edits
            with pytest.raises(EditRejected) as refused:
                await run.update_params(max_tokens="4k")
            with pytest.raises(EditRejected, match=r"`temperature` must be a number between 0.0 and 1.0; got 7."):
                await run.update_params(temperature=7)
        finally:
            replied.set()
        result = await run.result()
    assert str(refused.value) == (
        "update_params was refused: The new parameters were rejected:\n- `max_tokens` must be a positive integer."
    )
    assert (result.status, result.iterations) == ("completed", 1)


def test_invalid_run_input_is_the_client_side_error_too() -> None:
    from agent_runner.contract.run_input import parse_run_input

    with pytest.raises(InvalidRunInput, match="`max_tokens` must be a positive integer"):
        parse_run_input({**BASE, "max_tokens": "4k", "messages": [USER]})


async def test_a_system_prompt_near_the_payload_limit_is_never_carried_twice_into_a_continuation(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """1.1 MB fits in a run's input; carried twice (input and conversation) it would not fit in a continuation's."""
    system = "Be exact. " + "x" * 1_100_000
    fake_api.script(
        Reply(content=[text("One."), tool_use("toolu_1", "launch", {"target": "a"})], stop_reason="tool_use"),
        Reply(content=[text("Two."), tool_use("toolu_2", "launch", {"target": "b"})], stop_reason="tool_use"),
        end_turn("Done."),
        end_turn("Forked."),
    )
    async with worker(launch):
        run = await runner.start(
            **BASE, system=system, messages=[USER], tools=[launch], thread=False, continue_as_new={"events": 10}
        )
        async with asyncio.timeout(60):
            result = await run.result()
        status = await run.status()
        fork = await run.fork(3)
        await fork.until_done()
    assert (result.status, result.iterations, RAN) == ("completed", 3, ["a", "b"])
    assert status.continuations >= 2
    assert [body["system"] == system for body in fake_api.bodies()] == [True] * 4  # the fork's request too


EDITS_THE_INPUT_CHECK_REFUSES: list[Any] = [
    (
        "update_params",
        {"max_tokens": -1},
        "The new parameters were rejected:\n- `max_tokens` must be a positive integer.",
    ),
    (
        "update_params",
        {"model": ""},
        'The new parameters were rejected:\n- `model` must be a non-empty string such as "claude-sonnet-5-5".',
    ),
    (
        "update_params",
        {"model": 5},
        'The new parameters were rejected:\n- `model` must be a non-empty string such as "claude-sonnet-5-5".',
    ),
    ("inject", [{"type": "text"}], "The injected content was rejected:\n- content[0].text: Field required."),
    (
        "inject",
        [{"type": "image", "source": "x"}],
        "The injected content was rejected:\n- content[0].source: Input should be a valid dictionary.",
    ),
    (
        "inject",
        [{"type": "text", "text": "Fine."}, {"type": "bogus"}],
        "The injected content was rejected:\n- content[1].type is 'bogus', not a content block type that goes here;",
    ),
    (
        "inject",
        [{"type": "text", "text": "  "}],
        "The injected content was rejected:\n- content[0] is a text block with no text but whitespace; the API "
        "rejects it. Leave the block out.",
    ),
    ("inject", "", "There is nothing to inject: give text or content blocks."),
    ("inject", [], "There is nothing to inject: give text or content blocks."),
    (
        "add_tools",
        [{"name": 5}],
        "The tools were rejected:\n- `tools[0]` is a tool definition without a `name` or `type`.",
    ),
    (
        "add_tools",
        ["launch", {"foo": "bar"}],
        "The tools were rejected:\n- `tools[1]` is a tool definition without a `name` or `type`.",
    ),
    (
        "add_tools",
        [{"name": "x"}],
        "The tools were rejected:\n- `tools[0]` is a custom tool without an `input_schema`; the API refuses it. Give "
        'the JSON schema of its input, such as {"type": "object", "properties": {}}, or the `type` of a server tool.',
    ),
    (
        "add_tools",
        [{"type": "web_search_20250305", "name": "search"}],
        "The tools were rejected:\n- `tools[0]`.name: Input should be 'web_search'.",
    ),
    (
        "update_params",
        {"tool_choice": {"type": "tool", "name": "nope"}},
        "The new parameters were rejected:\n- `tool_choice` names the tool `nope`, which the run does not have (its "
        "tools are `launch`); the API refuses a request that forces a tool it was not given. Name one of its tools, "
        'or give {"type": "auto"}.',
    ),
    (
        "compact",
        {"type": "bogus"},
        "The compaction was rejected:\n- `compaction` is not what the Messages API takes (type: Input should be "
        '\'summarize\'). Give {"type": "summarize"}, with `instructions` to replace the server\'s summarization '
        "prompt.",
    ),
]
"""Edits whose value a run's input check refuses (``parse_run_input``): once accepted, each would have failed every
later request of the run (and of its forks and sends) with a 400, or sent content the API refuses."""


@pytest.mark.parametrize(("edit", "value", "expected"), EDITS_THE_INPUT_CHECK_REFUSES)
async def test_an_edit_the_input_check_would_refuse_is_refused_and_the_run_goes_on_unchanged(
    edit: str, value: Any, expected: str, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], thread=False, step=True)
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected) as refused:
            if edit == "update_params":
                await run.update_params(**value)
            elif edit == "inject":
                await run.inject(value)
            elif edit == "compact":
                await run.compact(value)
            else:
                await run.add_tools(*value)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    name = {"update_params": "update_params", "inject": "inject_message", "add_tools": "add_tools"}.get(edit, edit)
    assert str(refused.value).startswith(f"{name} was refused: {expected}")
    call = {"type": "tool_use", "id": "toolu_1", "name": "launch", "input": {"target": "a"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched a"}
    assert fake_api.bodies()[1] == {
        **BASE,
        "messages": [USER, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}],
        "tools": [launch.to_dict()],
        "stream": True,
    }
    assert RAN == ["a"]


async def test_a_tool_choice_edit_may_name_a_tool_a_queued_edit_adds_and_no_other(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """A ``tool_choice`` naming no tool of the run failed its next request with the API's 400, and the run with it;
    one naming a tool that an ``add_tools`` queued before it adds is what the API takes, as the SDK sends it."""
    probe = {"name": "probe", "description": "Probes.", "input_schema": {"type": "object", "properties": {}}}
    choice = {"type": "tool", "name": "probe"}
    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    async with worker(launch):
        run = await runner.start(
            **BASE, messages=[USER], tools=[launch], thread=False, step=True, betas=["inline-tools-2026-09-15"]
        )
        await wait_status(run, "waiting_for_step", 1)
        with pytest.raises(EditRejected) as refused:
            await run.update_params(tool_choice=choice)
        await run.add_tools(probe)
        await run.update_params(tool_choice=choice)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    assert str(refused.value) == (
        "update_params was refused: The new parameters were rejected:\n- `tool_choice` names the tool `probe`, which "
        "the run does not have (its tools are `launch`); the API refuses a request that forces a tool it was not "
        'given. Name one of its tools, or give {"type": "auto"}.'
    )
    call = {"type": "tool_use", "id": "toolu_1", "name": "launch", "input": {"target": "a"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched a"}
    addition = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": probe}}
    assert fake_api.bodies()[1] == {
        **BASE,
        "tool_choice": choice,
        "messages": [
            USER,
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
            {"role": "system", "content": [addition]},
        ],
        "tools": [launch.to_dict()],
        "stream": True,
    }


async def test_a_history_replaced_before_its_calls_ran_is_refused_and_their_results_are_kept(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """The transcript a client reads while a reply's calls wait (for a step, an approval) ends with those calls: put
    back as it is, after the tools ran, it dropped their results and the next request was one the API refuses."""
    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], thread=False, step=True)
        await wait_status(run, "waiting_for_step", 1)
        snapshot = await run.versioned_transcript()
        with pytest.raises(EditRejected) as refused:
            await run.replace_history(snapshot.messages, expected_version=snapshot.version)
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        assert (await run.result()).status == "completed"
    assert str(refused.value) == (
        "replace_history was refused: The new history was rejected:\n- `messages[1]` ends the conversation with tool "
        "calls that have no results (toolu_1); the API refuses that. End it with the user message that holds their "
        "`tool_result` blocks, or leave the calls out (a run's own calls get their results from its tools: let them "
        "run, then read the transcript again)."
    )
    call = {"type": "tool_use", "id": "toolu_1", "name": "launch", "input": {"target": "a"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched a"}
    assert fake_api.bodies()[1]["messages"] == [
        USER,
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]


UPDATE_MODELS = {
    "inject_message": "InjectMessage",
    "retry_turn": "RetryTurn",
    "replace_history": "ReplaceHistory",
    "update_params": "UpdateParams",
    "add_tools": "AddTools",
    "remove_tools": "RemoveTools",
    "compact": "Compact",
    "stop": "Stop",
    "approve_tool": "ApproveTool",
    "deny_tool": "DenyTool",
    "advance": "Advance",
    "wake": "Wake",
}
"""Every update a run takes, and the model its input is checked as."""

UNUSABLE_UPDATE_INPUTS = [
    (
        ["--input", "5"],
        "Invalid {model} update: input: Input should be a valid dictionary or instance of {model}.",
    ),
    (
        ["--input", "{}", "--input", "{}"],
        "An update takes one input, a JSON object, and this one was sent 2: send them as one object.",
    ),
    (
        ["--input", "[" * 600 + "]" * 600],
        "The update's input cannot be read (Invalid JSON: recursion limit exceeded at line 1 column 202): send one "
        "JSON object (encoding `json/plain`).",
    ),
    (
        ["--input", '"x"', "--input-meta", "encoding=binary/weird"],
        "The update's input cannot be read ('Unknown payload encoding binary/weird'): send one JSON object (encoding "
        "`json/plain`).",
    ),
]
"""Input a run cannot use, whichever update it is sent to, and what the sender is told ({model}: the update's)."""


def stock_update_error(client: Client, run_id: str, name: str, *args: str) -> str:
    """Send the update ``name`` with ``args`` through the stock `temporal` CLI, which must fail: what it printed."""
    command = ["workflow", "update", "execute", "--workflow-id", run_id, "--name", name, *args]
    with pytest.raises(subprocess.CalledProcessError) as failed:
        stock_temporal(client, *command)
    return str(failed.value.stderr).strip()


@pytest.mark.usefixtures("temporal_address")
async def test_an_update_with_input_it_cannot_use_is_refused_as_final_and_one_with_none_takes_its_defaults(
    client: Client, runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI
) -> None:
    """Temporal decodes an update's arguments before its validator runs and refuses what it cannot decode with a
    Python error marked retryable ("Failed decoding arguments", "missing 1 required positional argument"), which
    invites sending it again: each update reads its own input, so every such input is refused as final, saying what
    to send, and no input at all is the empty object (``temporal workflow update execute --name advance``)."""
    assert set(UPDATE_MODELS) == set(_Definition.must_from_class(AgentRun).updates)
    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    async with worker(launch):
        run = await runner.start(**BASE, messages=[USER], tools=[launch], thread=False, step=True)
        await wait_status(run, "waiting_for_step", 1)
        for name, model in UPDATE_MODELS.items():
            for args, expected in UNUSABLE_UPDATE_INPUTS:
                printed = await asyncio.to_thread(stock_update_error, client, run.id, name, *args)
                message = expected.format(model=model)
                assert (name, printed) == (
                    name,
                    f"Error: unable to update workflow: {message} (type: EditRejected, retryable: false)",
                )
        status = await run.status()
        assert (status.status, status.iterations, status.version) == ("waiting_for_step", 1, 1)
        advance = ["workflow", "update", "execute", "--workflow-id", run.id, "--name", "advance"]
        assert json.loads(await asyncio.to_thread(stock_temporal, client, *advance))["result"] == {"version": 1}
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    assert (result.status, result.iterations) == ("completed", 2)
    assert RAN == ["a"]
    assert fake_api.bodies()[1]["messages"][1:] == [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "launch", "input": {"target": "a"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "launched a"}]},
    ]


async def test_a_run_in_flight_that_a_later_input_check_would_refuse_goes_on_when_replayed(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started before a check existed (its worker did not have it) is replayed by a worker that has it: it goes
    on with the input it was given, where refusing it would fail its replay for ever (a non-determinism error)."""
    from agent_runner.contract import run_input as contract_run_input
    from agent_runner.workflows import agent_run

    fake_api.script(Reply([tool_use("toolu_1", "launch", {"target": "a"})], "tool_use"), end_turn("Done."))
    given = {**BASE, "messages": [USER], "refusal_fallbacks": [{"model": "m3", "bogus": 1}]}
    with monkeypatch.context() as older:
        for module in (contract_run_input, agent_run):  # a worker (and client) from before the check
            older.setattr(module, "late_problems", lambda _raw: [])
        async with worker(launch):
            run = await runner.start(**given, tools=[launch], step=True, thread=False)
            await wait_status(run, "waiting_for_step", 1)
    # A worker that has the check, with no cache: the run's next task replays it from its first event.
    async with worker(launch, tuning=WorkerTuning(max_cached_workflows=0)):
        await run.advance()
        await wait_status(run, "waiting_for_step", 2)
        await run.advance()
        result = await run.result()
    assert (result.status, result.iterations, RAN) == ("completed", 2, ["a"])


def test_the_later_input_checks_are_the_client_side_check_too() -> None:
    from agent_runner.contract.run_input import parse_run_input

    with pytest.raises(InvalidRunInput) as refused:
        parse_run_input(
            {
                **BASE,
                "messages": [USER],
                "refusal_fallbacks": ["m2", {"model": "m3", "bogus": 1, "temprature": 0, "system": None}],
            }
        )
    assert str(refused.value) == LATE_FALLBACK_PROBLEM
