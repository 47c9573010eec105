"""Encryption: conversation content never reaches Temporal in the clear; keys rotate; the UI's codec server works."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path

import aiohttp
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.codec import KEYS_ENV, EncryptionCodec, new_key
from agent_runner.connection import data_converter
from agent_runner.fake_api import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import fake_claude_worker
from tests.tools_for_tests import get_weather
from workflows.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[1]
OLD, NEW = new_key(), new_key()


async def test_a_run_with_encryption_keeps_its_content_out_of_temporal(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    converter = data_converter({KEYS_ENV: f"k1:{NEW}"})
    client = await Client.connect(temporal_env.client.service_client.config.target_host, data_converter=converter)
    queue = f"enc-{uuid.uuid4()}"
    fake_api.script(
        Reply([text("Checking."), tool_use("toolu_1", "get_weather", {"city": "Reykjavik"})], "tool_use"),
        end_turn("Sunny in Reykjavik."),
    )
    worker = fake_claude_worker(client, fake_api, queue, get_weather)
    async with worker:
        run = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[{"role": "user", "content": "Weather in Reykjavik?"}],
            tools=[get_weather],
        )
        final = await run.until_done()
        transcript = await run.transcript()
    assert final.content[0].type == "text" and final.content[0].text == "Sunny in Reykjavik."
    assert transcript[-2]["content"][0]["content"] == "sunny, 21C in Reykjavik"
    # What Temporal stores, read without the key: no trace of the conversation.
    raw = await temporal_env.client.get_workflow_handle(run.id).fetch_history()
    stored = json.dumps(raw.to_json_dict())
    assert "Reykjavik" not in stored and base64.b64encode(b"Reykjavik").decode() not in stored
    assert "binary/encrypted" in stored or base64.b64encode(b"binary/encrypted").decode() in stored


async def test_rotation_decrypts_what_an_older_key_encrypted() -> None:
    old = EncryptionCodec.from_env({KEYS_ENV: f"2026-05:{OLD}"})
    rotated = EncryptionCodec.from_env({KEYS_ENV: f"2026-11:{NEW},2026-05:{OLD}"})
    assert old is not None and rotated is not None
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b'{"secret": 1}')
    [encrypted] = await old.encode([payload])
    assert encrypted.metadata["encryption-key-id"] == b"2026-05"
    assert await rotated.decode([encrypted]) == [payload]
    [re_encrypted] = await rotated.encode([payload])
    assert re_encrypted.metadata["encryption-key-id"] == b"2026-11"
    with pytest.raises(ConfigurationError, match="encrypted with key '2026-11', which AGENT_RUNNER_ENCRYPTION_KEYS"):
        await old.decode([re_encrypted])


def test_a_malformed_key_says_how_to_make_one() -> None:
    with pytest.raises(ConfigurationError, match="python -m agent_runner.codec new-key"):
        EncryptionCodec.from_env({KEYS_ENV: "k1:not-base64!"})


async def test_the_codec_server_decodes_for_the_ui() -> None:
    codec = EncryptionCodec.from_env({KEYS_ENV: f"k1:{NEW}"})
    assert codec is not None
    [encrypted] = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')])
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.codec", "serve", "--port", "18081"],
        cwd=ROOT,
        env={**__import__("os").environ, KEYS_ENV: f"k1:{NEW}"},
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.decode().startswith("READY http://127.0.0.1:18081")
        body = {
            "payloads": [
                {
                    "metadata": {k: base64.b64encode(v).decode() for k, v in encrypted.metadata.items()},
                    "data": base64.b64encode(encrypted.data).decode(),
                }
            ]
        }
        async with aiohttp.ClientSession() as session:
            async with session.post("http://127.0.0.1:18081/decode", json=body) as response:
                decoded = await response.json()
                assert response.headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    finally:
        proc.terminate()
        proc.wait()
    assert decoded == {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'"hello"').decode(),
            }
        ]
    }
