"""The content store encrypted at rest (agent_runner/store.py): with AGENT_RUNNER_ENCRYPTION_KEYS set, a SQLite file or
a PostgreSQL database holds neither the conversation nor the sha256 references workflow history carries; keys rotate;
a store opened without its keys, with others, or a plain one opened with keys, says what to set in one line."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.codec import KEYS_ENV
from agent_runner.connection import data_converter
from agent_runner.contract.errors import BlobCorrupted
from agent_runner.contract.transcript import canonical, message_ref, next_head
from agent_runner.gc import history_refs
from agent_runner.store import (
    ChainNode,
    ContentStore,
    Reencrypted,
    StoreError,
    Swept,
    open_store,
    reencrypt,
    ref_for,
)
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.store_support import K1, K2, K3, empty_store_url, keys, worker_with_store
from tests.tools_for_tests import get_weather

SECRET = "The vault code is 7-4-1-9, Reykjavik branch."


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store's URL: a SQLite file, or a database of its own on the session's PostgreSQL server."""
    yield from empty_store_url(request, tmp_path, "crypto")


def at_rest(url: str) -> bytes:
    """Every byte the store keeps, as an attacker with the file or the database would read it."""
    if url.startswith("sqlite:"):
        path = Path(url.removeprefix("sqlite://"))
        return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))
    with psycopg.connect(url) as conn:
        rows = [
            *conn.execute("SELECT ref, data, written_at::text FROM blobs"),
            *conn.execute("SELECT head, coalesce(parent, ''), message FROM nodes"),
            *conn.execute("SELECT name, value, '' FROM meta"),
        ]
    return b"\n".join(bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode() for row in rows for v in row)


def refs_in(data: bytes) -> set[str]:
    return {m.decode() for m in re.findall(rb"sha256:[0-9a-f]{64}", data)}


@pytest_asyncio.fixture
async def encrypted(url: str) -> AsyncIterator[ContentStore]:
    store = open_store(url, environ=keys(f"k1:{K1}"))
    yield store
    await store.close()


# ------------------------------------------------------------------------------------------- what is at rest


async def test_blobs_and_chains_round_trip_and_nothing_readable_is_at_rest(encrypted: ContentStore, url: str) -> None:
    """Callers use references and plain bytes; the store keeps ciphertext under HMAC addresses."""
    message = canonical({"role": "user", "content": SECRET})
    ref = ref_for(message)
    head = next_head(None, ref)
    reply = canonical({"role": "assistant", "content": "Noted."})
    tip = next_head(head, ref_for(reply))
    assert await encrypted.put({ref: message, ref_for(reply): reply}) == len(message) + len(reply)
    assert await encrypted.put({ref: message}) == 0
    await encrypted.put_nodes([ChainNode(head, None, ref), ChainNode(tip, head, ref_for(reply))])

    assert await encrypted.get([ref]) == {ref: message}
    assert await encrypted.chain(tip) == [ref, ref_for(reply)]
    stats = await encrypted.stats()
    assert (stats.blobs, stats.nodes) == (2, 2)
    await encrypted.close()

    stored = at_rest(url)
    assert b"vault code" not in stored and b"Noted." not in stored
    for name in (ref, head, tip, ref_for(reply)):
        assert name.encode() not in stored and name.removeprefix("sha256:").encode() not in stored
    assert refs_in(stored) == set()


async def test_commit_seals_blobs_nodes_and_live_events_alike(encrypted: ContentStore, url: str) -> None:
    """``commit`` writes what ``put``, ``put_nodes`` and ``append_live`` would, as ciphertext under addresses."""
    message = canonical({"role": "user", "content": SECRET})
    ref = ref_for(message)
    head = next_head(None, ref)
    event = b'{"type":"text","text":"the vault code"}'

    assert await encrypted.commit({ref: message}, [ChainNode(head, None, ref)], ("run-1", [event])) == len(message)

    assert await encrypted.get([ref]) == {ref: message}
    assert await encrypted.chain(head) == [ref]
    assert [entry for _, entry in await encrypted.read_live("run-1")] == [event]
    await encrypted.close()
    stored = at_rest(url)
    assert b"vault code" not in stored
    assert ref.encode() not in stored and head.encode() not in stored


def file_under_another_run(url: str) -> None:
    """As an attacker with the database could: copy the first live event to the run the last one was filed under."""
    copy = (
        "INSERT INTO live (run_id, data, written_at) SELECT (SELECT run_id FROM live ORDER BY seq DESC LIMIT 1), "
        "data, written_at FROM live ORDER BY seq LIMIT 1"
    )
    if url.startswith("sqlite:"):
        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            conn.execute(copy)
        return
    with psycopg.connect(url) as conn:
        conn.execute(copy)


async def test_a_live_event_filed_under_another_run_does_not_open(encrypted: ContentStore, url: str) -> None:
    """A run's live events are sealed with its id: moved to another run's log, one is dropped, never shown there."""
    await encrypted.append_live("run-1", [b'{"text":"the vault code"}'])
    await encrypted.append_live("run-2", [b'{"text":"hello"}'])
    file_under_another_run(url)

    assert [entry for _, entry in await encrypted.read_live("run-2")] == [b'{"text":"hello"}']
    assert [entry for _, entry in await encrypted.read_live("run-1")] == [b'{"text":"the vault code"}']


async def test_a_run_with_keys_leaves_neither_its_text_nor_its_history_refs_in_the_store(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, url: str
) -> None:
    """A whole run through the real dev server: the store holds what it needs, and reveals none of it."""
    environ = keys(f"k1:{K1}")
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, data_converter=data_converter(environ)
    )
    queue = f"store-crypto-{uuid.uuid4()}"
    fake_api.script(
        Reply([text("Checking the vault."), tool_use("toolu_1", "get_weather", {"city": "Reykjavik"})], "tool_use"),
        end_turn("Sunny in Reykjavik; " + "the vault is fine. " * 300),  # over 4 KB: stored apart too
    )
    first = {"role": "user", "content": SECRET}
    store = open_store(url, environ=environ)
    async with store, worker_with_store(client, fake_api, queue, store):
        run = await AgentRunner(client, task_queue=queue, store=store).start(
            model="claude-fake-1", max_tokens=64, messages=[first], tools=[get_weather]
        )
        await run.until_done()
        transcript = await run.transcript()
        history = await client.get_workflow_handle(run.id).fetch_history()
    assert transcript[0] == first and transcript[-1]["content"][0]["text"].startswith("Sunny in Reykjavik; ")

    refs = await history_refs(history.events, client.data_converter.payload_codec)
    assert next_head(None, message_ref(first, short=True)) in refs and len(refs) >= 5  # the transcript's first head
    stored = at_rest(url)
    assert b"vault" not in stored and b"Reykjavik" not in stored
    assert not {ref for ref in refs if ref.encode() in stored or ref.removeprefix("sha256:").encode() in stored}
    assert refs_in(stored) == set()


# ------------------------------------------------------------------------------------------------- rotation


async def test_rotation_reads_what_the_old_key_wrote_and_writes_under_the_new_one(url: str) -> None:
    """Written with k1, read with "k2,k1"; once k2 has opened the store, k2 alone opens it and reads k2's writes."""
    old = canonical({"role": "user", "content": "written under k1"})
    new = canonical({"role": "user", "content": "written under k2"})
    async with open_store(url, environ=keys(f"k1:{K1}")) as store:
        await store.put({ref_for(old): old})
        await store.put_nodes([ChainNode(next_head(None, ref_for(old)), None, ref_for(old))])

    async with open_store(url, environ=keys(f"k2:{K2},k1:{K1}")) as store:
        assert await store.get([ref_for(old)]) == {ref_for(old): old}
        assert await store.chain(next_head(None, ref_for(old))) == [ref_for(old)]
        # Same address under the new key: the old blob is found, nothing is written twice.
        assert await store.put({ref_for(old): old}) == 0
        await store.put({ref_for(new): new})

    async with open_store(url, environ=keys(f"k2:{K2}")) as store:
        assert await store.get([ref_for(new)]) == {ref_for(new): new}
        with pytest.raises(StoreError) as raised:
            await store.get([ref_for(old)])
    assert str(raised.value) == (
        f"the store at {url} holds blob {ref_for(old)} encrypted with key 'k1', which {KEYS_ENV} does not hold: add "
        "that key back (after the current one)"
    )


# ---------------------------------------------------------------------------------------------- wrong keys


async def _written_with(url: str, value: str) -> None:
    data = b'"anything"'
    async with open_store(url, environ=keys(value)) as store:
        await store.put({ref_for(data): data})


async def test_an_encrypted_store_opened_without_keys_says_to_set_them(url: str) -> None:
    await _written_with(url, f"k1:{K1}")
    with pytest.raises(StoreError) as raised:
        open_store(url, environ={})
    assert str(raised.value) == (
        f"the store at {url} is encrypted: set {KEYS_ENV} to the keys it was written with (the workers' keys)"
    )


@pytest.mark.parametrize("value", [f"k3:{K3}", f"k1:{K3}"], ids=["another_id", "same_id_other_key"])
async def test_an_encrypted_store_opened_with_other_keys_names_the_key_it_needs(url: str, value: str) -> None:
    await _written_with(url, f"k1:{K1}")
    with pytest.raises(StoreError) as raised:
        open_store(url, environ=keys(value))
    assert str(raised.value) == (
        f"the store at {url} is encrypted with key 'k1', and {KEYS_ENV} holds none that opens it: set {KEYS_ENV} to "
        "the keys it was written with (the workers' keys)"
    )


async def test_a_plain_store_with_content_is_not_encrypted_behind_its_readers_back(url: str) -> None:
    """Mixing would leave its old content unreadable: the store refuses, and says how to go on."""
    data = b'"plain"'
    async with open_store(url, environ={}) as store:
        await store.put({ref_for(data): data})
    with pytest.raises(StoreError) as raised:
        open_store(url, environ=keys(f"k1:{K1}"))
    assert str(raised.value) == (
        f"the store at {url} holds unencrypted content: encrypt it in place with `agent-runner store reencrypt` "
        f"({KEYS_ENV} set; runs may go on meanwhile), unset {KEYS_ENV} to use it as it is, or point "
        "AGENT_RUNNER_STORE at a new store"
    )


async def test_the_cli_prints_the_missing_keys_error_as_one_line(tmp_path: Path) -> None:
    """What a person sees: `error: ` and the same line, exit 1."""
    import subprocess
    import sys

    url = f"sqlite://{tmp_path}/store.db"
    await _written_with(url, f"k1:{K1}")
    done = subprocess.run(
        [sys.executable, "-m", "agent_runner.cli", "store", "gc", "--retention", "30d", "--dry-run"],
        env={"PATH": "/usr/bin:/bin", "AGENT_RUNNER_STORE": url, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        f"error: the store at {url} is encrypted: set {KEYS_ENV} to the keys it was written with (the workers' keys)\n",
    )


# ---------------------------------------------------------------------------------------------- reencrypt


async def test_reencrypt_seals_what_was_stored_before_the_keys_while_processes_go_on(url: str) -> None:
    """Sealed beside the unencrypted copies first; processes with the keys read both forms (gc keeps both) and a
    process without them, running since before, goes on; then the copies go, and nothing readable is at rest."""
    environ = keys(f"k1:{K1}")
    message = canonical({"role": "user", "content": SECRET})
    late = canonical({"role": "assistant", "content": "Noted, Reykjavik."})
    after = canonical({"role": "user", "content": "Thanks."})
    ref, late_ref, after_ref = ref_for(message), ref_for(late), ref_for(after)
    head = next_head(None, ref)
    late_head = next_head(head, late_ref)
    tip = next_head(late_head, after_ref)
    async with open_store(url, environ={}) as plain:
        await plain.put({ref: message})
        await plain.put_nodes([ChainNode(head, None, ref)])
        await plain.append_live("run-1", [b'{"text": "the vault"}'])
    straggler = open_store(url, environ={})  # a worker without the keys, running since before
    try:
        assert await reencrypt(url, environ=environ) == Reencrypted(
            blobs=1, nodes=1, corrupted=0, removed=False, left=2
        )
        with pytest.raises(StoreError) as raised:
            open_store(url, environ={})  # a process started without the keys from now on
        assert str(raised.value) == (
            f"the store at {url} is encrypted: set {KEYS_ENV} to the keys it was written with (the workers' keys)"
        )
        await straggler.put({late_ref: late})
        await straggler.put_nodes([ChainNode(late_head, head, late_ref)])
        assert await straggler.chain(late_head) == [ref, late_ref]
        async with open_store(url, environ=environ) as keyed:
            assert await keyed.get([ref, late_ref]) == {ref: message, late_ref: late}
            assert await keyed.chain(late_head) == [ref, late_ref]  # stored unencrypted only
            await keyed.put({after_ref: after})
            await keyed.put_nodes([ChainNode(tip, late_head, after_ref)])  # on a chain stored unencrypted
            assert await keyed.chain(tip) == [ref, late_ref, after_ref]
            later = time.time() + 60  # everything is old enough to go, unless referenced
            assert await keyed.sweep({ref, late_ref, after_ref}, {head, late_head, tip}, written_before=later) == Swept(
                0, 0, 0
            )
    finally:
        await straggler.close()
    assert await reencrypt(url, environ=environ, remove_plaintext=True) == Reencrypted(
        blobs=2, nodes=2, corrupted=0, removed=True, left=0
    )
    async with open_store(url, environ=environ) as keyed:
        assert await keyed.get([ref, late_ref, after_ref]) == {ref: message, late_ref: late, after_ref: after}
        assert await keyed.chain(tip) == [ref, late_ref, after_ref]
    stored = at_rest(url)
    assert b"vault" not in stored and b"Reykjavik" not in stored and b"Thanks" not in stored
    assert refs_in(stored) == set()
    assert await reencrypt(url, environ=environ, remove_plaintext=True) == Reencrypted(
        blobs=0, nodes=0, corrupted=0, removed=True, left=0
    )


async def test_a_run_started_without_keys_goes_on_with_them_across_a_reencrypt(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, url: str
) -> None:
    """A run waits for approval on a worker without the keys; the store is reencrypted and the worker restarted with
    them; the run carries on, its transcript whole, and the store ends holding nothing readable."""
    environ = keys(f"k1:{K1}")
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, data_converter=data_converter({})
    )
    queue = f"store-reencrypt-{uuid.uuid4()}"
    fake_api.script(
        Reply([text("Checking the vault."), tool_use("toolu_1", "get_weather", {"city": "Reykjavik"})], "tool_use"),
        end_turn("Sunny in Reykjavik; " + "the vault is fine. " * 300),
    )
    first = {"role": "user", "content": SECRET}
    plain = open_store(url, environ={})
    async with plain, worker_with_store(client, fake_api, queue, plain):
        run = await AgentRunner(client, task_queue=queue, store=plain).start(
            model="claude-fake-1",
            max_tokens=64,
            messages=[first],
            tools=[get_weather],
            approval={"tools": ["get_weather"]},
        )
        async with asyncio.timeout(30):
            while not await run.pending_approvals():
                await asyncio.sleep(0.05)
        before = await plain.stats()
    sealed = await reencrypt(url, environ=environ)
    assert (sealed.blobs, sealed.nodes, sealed.left) == (before.blobs, before.nodes, before.blobs + before.nodes)
    keyed = open_store(url, environ=environ)
    async with keyed, worker_with_store(client, fake_api, queue, keyed):
        attached = AgentRunner(client, task_queue=queue, store=keyed).attach(run.id)
        await attached.approve("toolu_1")
        result = await attached.result()
        transcript = await attached.transcript()
        done = await reencrypt(url, environ=environ, remove_plaintext=True)
        async with open_store(url, environ=environ) as reader:
            assert await AgentRunner(client, task_queue=queue, store=reader).attach(run.id).transcript() == transcript
    assert result.status == "completed"
    assert transcript[0] == first and transcript[-1]["content"][0]["text"].startswith("Sunny in Reykjavik; ")
    assert (done.removed, done.left) == (True, 0)
    stored = at_rest(url)
    assert b"vault" not in stored and b"Reykjavik" not in stored
    assert refs_in(stored) == set()


async def test_the_cli_reencrypts_and_says_what_to_do_next(tmp_path: Path) -> None:
    """`agent-runner store reencrypt`, then `--remove-plaintext`: one line each, exit 0."""
    import subprocess
    import sys

    url = f"sqlite://{tmp_path}/store.db"
    data = canonical({"role": "user", "content": SECRET})
    async with open_store(url, environ={}) as plain:
        await plain.put({ref_for(data): data})
    env = {"PATH": "/usr/bin:/bin", "AGENT_RUNNER_STORE": url, "HOME": str(tmp_path), KEYS_ENV: f"k1:{K1}"}
    lines = []
    for extra in ([], ["--remove-plaintext"]):
        done = subprocess.run(
            [sys.executable, "-m", "agent_runner.cli", "store", "reencrypt", *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stderr) == (0, "")
        lines.append(done.stdout)
    assert lines == [
        "sealed 1 blobs and 0 chain nodes stored unencrypted; their unencrypted copies stay until every worker and "
        "client runs with the keys: then run `agent-runner store reencrypt --remove-plaintext`\n",
        "sealed 1 blobs and 0 chain nodes stored unencrypted and removed their unencrypted copies: the store holds no "
        "unencrypted content\n",
    ]
    assert b"vault" not in at_rest(url)


# ------------------------------------------------------------------------------------------------ integrity


async def test_a_blob_moved_to_another_address_is_refused_as_corrupted(tmp_path: Path) -> None:
    """Ciphertext is bound to its reference: swapping two rows' bytes does not hand one content out for another."""
    url = f"sqlite://{tmp_path}/store.db"
    a, b = b'"first"', b'"second"'
    async with open_store(url, environ=keys(f"k1:{K1}")) as store:
        await store.put({ref_for(a): a, ref_for(b): b})
    with sqlite3.connect(tmp_path / "store.db") as conn:
        rows = list(conn.execute("SELECT ref, data FROM blobs"))
        conn.execute("UPDATE blobs SET data = ? WHERE ref = ?", (rows[1][1], rows[0][0]))
    async with open_store(url, environ=keys(f"k1:{K1}")) as store:
        with pytest.raises(BlobCorrupted) as raised:
            await store.get([ref_for(a), ref_for(b)])
    assert raised.value.refs in ((ref_for(a),), (ref_for(b),))
