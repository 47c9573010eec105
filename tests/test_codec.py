"""Encryption: conversation content never reaches Temporal in the clear; keys rotate; the UI's codec server works."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
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
from agent_runner.codec import KEYS_ENV, PLAINTEXT_WARNING, TOKEN_ENV, EncryptionCodec, new_key
from agent_runner.connection import data_converter
from agent_runner.contract.errors import ConfigurationError, ModelRequestRejected
from agent_runner.testing import FakeMessagesAPI, Fault, Reply, end_turn, error_body, text, tool_use
from tests.conftest import fake_claude_worker
from tests.tools_for_tests import get_weather

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


async def test_a_worker_that_encrypts_says_once_that_a_client_without_the_keys_wrote_plaintext(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, caplog: pytest.LogCaptureFixture
) -> None:
    """It goes on with the run (one started before encryption was on must), but the history holds its input in
    plaintext, which the README's "only ciphertext" does not allow for: the operator learns it from the log."""
    target = temporal_env.client.service_client.config.target_host
    keyed = await Client.connect(target, data_converter=data_converter({KEYS_ENV: f"k1:{NEW}"}))
    keyless = await Client.connect(target, data_converter=data_converter({}))
    queue = f"enc-{uuid.uuid4()}"
    fake_api.script(end_turn("Sunny."), end_turn("Sunny again."), end_turn("And again."))
    ask = {"model": "claude-fake-1", "max_tokens": 64, "messages": [{"role": "user", "content": "Weather in Oslo?"}]}
    async with fake_claude_worker(keyed, fake_api, queue):
        with caplog.at_level(logging.WARNING, logger="agent_runner.codec"):
            await (await AgentRunner(keyed, task_queue=queue).start(**ask)).until_done()
            told_before = [r.getMessage() for r in caplog.records if r.name == "agent_runner.codec"]
            for _ in range(2):
                run = await AgentRunner(keyless, task_queue=queue).start(**ask)
                await keyed.get_workflow_handle(run.id).result()
    told = [r.getMessage() for r in caplog.records if r.name == "agent_runner.codec"]
    assert told_before == []
    assert told == [PLAINTEXT_WARNING]
    raw = await temporal_env.client.get_workflow_handle(run.id).fetch_history()
    assert b"Weather in Oslo?" in raw.events[0].workflow_execution_started_event_attributes.input.payloads[0].data


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


TOKEN = "a-codec-token-of-32-characters!!"


async def test_the_codec_server_decodes_for_the_ui_with_its_token_and_origin_only() -> None:
    codec = EncryptionCodec.from_env({KEYS_ENV: f"k1:{NEW}"})
    assert codec is not None
    [encrypted] = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')])
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.codec", "serve", "--port", "18081"],
        cwd=ROOT,
        env={**os.environ, KEYS_ENV: f"k1:{NEW}", TOKEN_ENV: TOKEN},
        stdout=subprocess.PIPE,
    )
    body = {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in encrypted.metadata.items()},
                "data": base64.b64encode(encrypted.data).decode(),
            }
        ]
    }
    base = "http://127.0.0.1:18081"
    ui = {"Origin": "http://localhost:8233"}
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.decode().startswith(f"READY {base}")
        async with aiohttp.ClientSession() as session:
            refusals = []
            for url, headers in [
                (f"{base}/decode", ui),  # no token
                (f"{base}/decode", {**ui, "Authorization": "Bearer wrong-token-of-some-length"}),
                (f"{base}/wrong-token-of-some-length/decode", ui),
                (f"{base}/{TOKEN}/decode", {"Origin": "http://evil.example"}),  # the right token, a foreign page
            ]:
                async with session.post(url, json=body, headers=headers) as response:
                    refusals.append(response.status)
            decoded = []
            for url, headers in [
                (f"{base}/decode", {**ui, "Authorization": f"Bearer {TOKEN}"}),
                (f"{base}/{TOKEN}/decode", ui),
                (f"{base}/{TOKEN}/decode", {}),  # no browser: no origin to check
            ]:
                async with session.post(url, json=body, headers=headers) as response:
                    assert response.status == 200
                    decoded.append(await response.json())
                    if headers:
                        assert response.headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
    finally:
        proc.terminate()
        proc.wait()
    assert refusals == [401, 401, 401, 403]
    plain = {
        "payloads": [
            {
                "metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
                "data": base64.b64encode(b'"hello"').decode(),
            }
        ]
    }
    assert decoded == [plain, plain, plain]


async def test_the_codec_server_answers_400_with_the_reason_for_a_body_it_cannot_decode() -> None:
    """Not JSON, or payloads under another key: the UI shows why, instead of a 500 and a traceback in the log."""
    other = EncryptionCodec({"k1": base64.b64decode(OLD)})
    [encrypted] = await other.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')])
    under_another_key = {
        "payloads": [
            {
                "metadata": {k: base64.b64encode(v).decode() for k, v in encrypted.metadata.items()},
                "data": base64.b64encode(encrypted.data).decode(),
            }
        ]
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.codec", "serve", "--port", "18083"],
        cwd=ROOT,
        env={**os.environ, KEYS_ENV: f"k1:{NEW}", TOKEN_ENV: TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    answers = []
    try:
        assert proc.stdout is not None
        await asyncio.to_thread(proc.stdout.readline)
        async with aiohttp.ClientSession() as session:
            for body in (b"not json", b'{"payloads": 1}', json.dumps(under_another_key).encode()):
                async with session.post(f"http://127.0.0.1:18083/{TOKEN}/decode", data=body) as response:
                    answers.append((response.status, await response.text()))
    finally:
        proc.terminate()
        _, stderr = proc.communicate()
    must_be = 'the body must be JSON such as {"payloads": [...]}: '
    assert answers[:2] == [
        (400, must_be + "Failed to load JSON: Expecting value: line 1 column 1 (char 0)."),
        (
            400,
            must_be + "Failed to parse payloads field: repeated field payloads must be in [] which is 1 at Payloads.",
        ),
    ]
    assert answers[2] == (
        400,
        f"A payload encrypted with key 'k1' does not decrypt with the key {KEYS_ENV} holds under that id (another "
        f"key with the same id, or a payload that was changed): set {KEYS_ENV} to the keys the workers use.",
    )
    assert b"Traceback" not in stderr


def test_the_codec_server_will_not_start_without_a_token() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agent_runner.codec", "serve", "--port", "18082"],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != TOKEN_ENV}, KEYS_ENV: f"k1:{NEW}"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        1,
        f"error: set {TOKEN_ENV} to a secret of 16 characters or more (python -m agent_runner.codec new-key makes "
        "one): anyone who can reach the codec server could decrypt your runs otherwise.\n",
    )


async def test_a_failure_message_quoting_the_conversation_is_encrypted_too(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> None:
    converter = data_converter({KEYS_ENV: f"k1:{NEW}"})
    client = await Client.connect(temporal_env.client.service_client.config.target_host, data_converter=converter)
    queue = f"enc-fail-{uuid.uuid4()}"
    fake_api.script(Fault(400, body=error_body(400, "prompt mentions Reykjavik, which is not allowed")))
    async with fake_claude_worker(client, fake_api, queue):
        run = await AgentRunner(client, task_queue=queue).start(
            model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Weather in Reykjavik?"}]
        )
        with pytest.raises(ModelRequestRejected, match="Reykjavik"):  # the client, with the key, reads it
            await run.until_done()
    raw = await temporal_env.client.get_workflow_handle(run.id).fetch_history()
    stored = json.dumps(raw.to_json_dict())
    assert "Reykjavik" not in stored and "not allowed" not in stored
    assert "Encoded failure" in stored


def test_a_key_id_listed_twice_is_refused() -> None:
    """Else the later key wins silently, and what the earlier one sealed no longer opens."""
    with pytest.raises(ConfigurationError) as raised:
        EncryptionCodec.from_env({KEYS_ENV: f"k1:{OLD},k1:{NEW}"})
    assert str(raised.value) == (
        f"{KEYS_ENV} lists the key id 'k1' twice: give each key an id of its own (the first key encrypts; every "
        "payload names the id of the key that encrypted it)."
    )


async def test_a_wrong_key_under_the_right_id_is_a_configuration_error_naming_it() -> None:
    """Not the cipher's bare InvalidTag, which the worker would log with no message."""
    codec, wrong = EncryptionCodec({"k1": base64.b64decode(OLD)}), EncryptionCodec({"k1": base64.b64decode(NEW)})
    [encrypted] = await codec.encode([Payload(metadata={"encoding": b"json/plain"}, data=b'"hello"')])
    with pytest.raises(ConfigurationError) as raised:
        await wrong.decode([encrypted])
    assert str(raised.value) == (
        f"A payload encrypted with key 'k1' does not decrypt with the key {KEYS_ENV} holds under that id (another "
        f"key with the same id, or a payload that was changed): set {KEYS_ENV} to the keys the workers use."
    )


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        pytest.param(
            None,
            f"error: A payload is encrypted (with key 'k1'), and {KEYS_ENV} is not set in this process: set it to the "
            "keys the workers use.\n",
            id="no-keys",
        ),
        pytest.param(
            f"k1:{OLD}",
            f"error: A payload encrypted with key 'k1' does not decrypt with the key {KEYS_ENV} holds under that id "
            f"(another key with the same id, or a payload that was changed): set {KEYS_ENV} to the keys the workers "
            "use.\n",
            id="wrong-key",
        ),
    ],
)
@pytest.mark.parametrize("command", ["status", "transcript", "follow"])
@pytest.mark.usefixtures("temporal_address")
async def test_the_cli_without_the_runs_keys_says_so_in_one_line(
    command: str,
    keys: str | None,
    expected: str,
    encrypted_run: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`status`, `transcript` and `follow` of an encrypted run print what to set, not a traceback."""
    from agent_runner import cli

    if keys is None:
        monkeypatch.delenv(KEYS_ENV, raising=False)
    else:
        monkeypatch.setenv(KEYS_ENV, keys)
    assert await cli.amain([command, encrypted_run]) == 1
    assert capsys.readouterr().err == expected


@pytest.fixture(scope="module")
def encrypted_run_holder() -> dict[str, str]:
    return {}


@pytest.fixture
async def encrypted_run(
    encrypted_run_holder: dict[str, str], temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI
) -> str:
    """A run that ended, encrypted under ``k1:NEW`` (one for the module)."""
    if "id" not in encrypted_run_holder:
        converter = data_converter({KEYS_ENV: f"k1:{NEW}"})
        client = await Client.connect(temporal_env.client.service_client.config.target_host, data_converter=converter)
        queue = f"enc-cli-{uuid.uuid4()}"
        fake_api.script(end_turn("A secret answer."))
        async with fake_claude_worker(client, fake_api, queue):
            run = await AgentRunner(client, task_queue=queue).start(
                model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "A secret question."}]
            )
            await run.until_done()
        encrypted_run_holder["id"] = run.id
    return encrypted_run_holder["id"]
