"""Record the workflow histories that tests/test_replay.py replays against the current code.

Run it only when a deliberate, versioned change to `AgentRun` makes new histories necessary; keep the old files,
since runs started on the old code must still replay:

    python tests/histories/record.py NAME     # writes tests/histories/NAME.json
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import anthropic
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from activities.claude import ClaudeActivities  # noqa: E402
from activities.tools import ToolRegistry  # noqa: E402
from agent_runner.client import AgentRunner  # noqa: E402
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use  # noqa: E402
from tests.conftest import FAST_SERVER_ARGS, TEMPORAL_BIN  # noqa: E402
from tests.tools_for_tests import get_time, get_weather  # noqa: E402
from worker import build_worker  # noqa: E402

HERE = Path(__file__).resolve().parent


async def record(name: str) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        dev_server_extra_args=FAST_SERVER_ARGS,
        data_converter=pydantic_data_converter,
    )
    with FakeMessagesAPI() as fake:
        queue = f"record-{uuid.uuid4()}"
        worker = build_worker(
            env.client,
            registry=ToolRegistry([get_weather, get_time]),
            task_queue=queue,
            claude=ClaudeActivities(lambda: anthropic.AsyncAnthropic(base_url=fake.url, api_key="k", max_retries=0)),
        )
        runner = AgentRunner(env.client, task_queue=queue)
        async with worker:
            # Two parallel tools, an approval, an injected message in step mode, a retry and a pause_turn.
            fake.script(
                Reply(
                    [
                        text("Checking."),
                        tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                        tool_use("toolu_2", "get_time", {"city": "Paris"}),
                    ],
                    "tool_use",
                ),
                Reply([text("searching")], "pause_turn"),
                end_turn("Sunny, 14:05."),
                end_turn("Ensoleillé, 14h05."),
            )
            run = await runner.start(
                model="claude-fake-1",
                max_tokens=512,
                messages=[{"role": "user", "content": "Paris?"}],
                tools=[get_weather, get_time],
                step=True,
                approval={"tools": ["get_time"]},
                result_hooks=["cache_last_tool_result"],
            )
            await wait(run, "waiting_for_step", 1)
            await run.advance()
            await wait(run, "waiting_for_approval", 1)
            await run.approve("toolu_2")
            for iteration in (2, 3):
                await wait(run, "waiting_for_step", iteration)
                if iteration == 3:
                    await run.inject("En français ?")
                await run.advance()
            await wait(run, "waiting_for_step", 4)
            await run.stop("recorded")
            await run.result()
            history = await run.handle.fetch_history()
        (HERE / f"{name}.json").write_text(json.dumps(history.to_json_dict(), indent=1) + "\n")
    await env.shutdown()


async def wait(run: object, status: str, iterations: int) -> None:
    from agent_runner.client import Run

    assert isinstance(run, Run)
    for _ in range(400):
        current = await run.status()
        if current.status == status and current.iterations == iterations:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"run never reached {status} at {iterations}: {await run.status()}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/histories/record.py NAME (a new name: keep the recorded histories)")
    asyncio.run(record(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)
