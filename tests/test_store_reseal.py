"""Resealing an encrypted content store after a key rotation (agent_runner/reseal.py, `agent-runner store reseal`):
what an old key sealed is sealed again under the current key, in place and while processes go on, so that the old
key can leave AGENT_RUNNER_ENCRYPTION_KEYS; it is idempotent, resumable, and refuses bad keys in one line."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agent_runner.client import AgentRunner
from agent_runner.codec import KEYS_ENV
from agent_runner.connection import data_converter
from agent_runner.content import Content
from agent_runner.contract.transcript import canonical
from agent_runner.reseal import KeyUse, Resealed, reseal
from agent_runner.store import ContentStore, StoreError, open_store, ref_for
from agent_runner.testing import FakeMessagesAPI, end_turn
from tests.store_support import K1, K2, empty_store_url, keys, worker_with_store

OLD = f"k1:{K1}"
ROTATED = f"k2:{K2},k1:{K1}"
NEW = f"k2:{K2}"
REMOVABLE = (
    f"key(s) 'k1' can now be removed from {KEYS_ENV} once every worker and client has the current key (and no "
    "run's Temporal history needs them)"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty store's URL: a SQLite file, or a database of its own on the session's PostgreSQL server."""
    yield from empty_store_url(request, tmp_path, "reseal")


def meta_names(url: str) -> set[str]:
    if url.startswith("sqlite:"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
            return {name for (name,) in conn.execute("SELECT name FROM meta")}
    with psycopg.connect(url) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM meta")}


MESSAGES = [
    {"role": "user", "content": "The vault code is 7-4-1-9."},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "And the branch is Reykjavik."},
]
BIG = canonical({"tool_result": "sunny " * 2000})
SHORT = canonical({"a value": "named by its short reference"})


async def write_old_content(url: str) -> tuple[str | None, str | None]:
    """Under k1 alone: a transcript by long references and one by short ones, two more blobs and live events."""
    async with open_store(url, environ=keys(OLD)) as store:
        content = Content(store)
        long_head = await content.append(None, MESSAGES)
        (short_head,) = await content.append_many([(None, MESSAGES[:2])], short=True)
        await store.put({ref_for(BIG): BIG, ref_for(SHORT, True): SHORT})
        await store.append_live("run-1", [b'{"text": "the vault"}', b'{"text": " code"}'])
    return long_head, short_head


async def read_everything(store: ContentStore, heads: tuple[str | None, str | None]) -> None:
    """Every blob and chain reads back exactly, through Content and the store alike."""
    content = Content(store)
    assert await content.messages(heads[0]) == MESSAGES
    assert await content.messages(heads[1]) == MESSAGES[:2]
    assert await store.get([ref_for(BIG), ref_for(SHORT, True)]) == {ref_for(BIG): BIG, ref_for(SHORT, True): SHORT}


# ---------------------------------------------------------------------------------------------- a rotation


async def test_after_a_rotation_reseal_leaves_nothing_for_the_old_key(url: str) -> None:
    """Written under k1, rotated to "k2,k1" (a process writes under k2), resealed: k2 alone reads everything."""
    heads = await write_old_content(url)
    fresh = canonical({"role": "user", "content": "written under k2"})
    async with open_store(url, environ=keys(ROTATED)) as store:
        await store.put({ref_for(fresh): fresh})
        await store.append_live("run-2", [b'{"text": "new"}'])

    checked = await reseal(url, environ=keys(ROTATED), check=True)
    assert checked == Resealed(
        url, "k2", 0, 0, 2, 0, {"k1": KeyUse(7, 5), "k2": KeyUse(1, 0)}, ("k2", "k1"), checked=True
    )
    assert checked.summary() == (
        f"keys in use in the store at {url}: 'k1': 7 blobs, 5 nodes; 'k2' (current): 1 blobs, 0 nodes; 2 live events "
        "(stream previews) under other keys than 'k2'. Run `agent-runner store reseal` to reseal them under 'k2'"
    )

    done = await reseal(url, environ=keys(ROTATED))
    assert done == Resealed(url, "k2", 7, 5, 2, 0, {"k2": KeyUse(8, 5)}, ("k2", "k1"))
    assert done.summary() == (
        "resealed 7 blobs and 5 nodes under key 'k2', and removed 2 live events (stream previews) sealed under old "
        f"keys; 0 left under old keys: {REMOVABLE}"
    )
    # The address key is no longer kept under k1 either: a leaked k1 opens nothing in the store.
    assert {name for name in meta_names(url) if "k1" in name} == {"key-since:k1"}

    async with open_store(url, environ=keys(NEW)) as store:
        await read_everything(store, heads)
        assert await store.get([ref_for(fresh)]) == {ref_for(fresh): fresh}
        assert await store.read_live("run-1") == []
        assert [data for _, data in await store.read_live("run-2")] == [b'{"text": "new"}']
    with pytest.raises(StoreError) as raised:
        open_store(url, environ=keys(OLD))
    assert str(raised.value) == (
        f"the store at {url} is encrypted with key 'k2', and {KEYS_ENV} holds none that opens it: set {KEYS_ENV} to "
        "the keys it was written with (the workers' keys)"
    )

    again = await reseal(url, environ=keys(ROTATED))
    assert again.summary() == (
        f"nothing to reseal: all 8 blobs and 5 nodes are under the current key 'k2'; key(s) 'k1' seal nothing here: "
        f"they can be removed from {KEYS_ENV} once every worker and client has the current key (and no run's "
        "Temporal history needs them)"
    )


async def test_a_reseal_stopped_halfway_finishes_when_run_again_while_an_old_process_writes(url: str) -> None:
    """Stopped after 4 rows, every row is in one form or the other (k2,k1 reads all); a process still on k1 alone
    writes meanwhile; the next runs reseal the rest, then what it wrote, and say so."""
    heads = await write_old_content(url)
    straggler = open_store(url, environ=keys(OLD))  # a worker not yet restarted with the new key
    try:
        first = await reseal(url, environ=keys(ROTATED), limit=4)
        assert (first.blobs, first.nodes, dict(first.in_use)) == (4, 0, {"k1": KeyUse(3, 5), "k2": KeyUse(4, 0)})
        assert first.summary() == (
            "resealed 4 blobs and 0 nodes under key 'k2', and removed 2 live events (stream previews) sealed under "
            "old keys; 3 blobs and 5 nodes are left under key(s) 'k1' (written meanwhile by a process whose first "
            f"key is not 'k2', or corrupted): restart every worker and client with 'k2' first in {KEYS_ENV}, then "
            "run it again"
        )
        async with open_store(url, environ=keys(ROTATED)) as store:
            await read_everything(store, heads)
        late = canonical({"role": "assistant", "content": "written under k1 after the rotation"})
        await straggler.put({ref_for(late): late})
        second = await reseal(url, environ=keys(ROTATED))
        assert (second.blobs, second.nodes, dict(second.in_use)) == (4, 5, {"k2": KeyUse(8, 5)})
        # Still open, the straggler goes on writing under k1 (it holds the address key): the next run catches it.
        later = canonical({"role": "assistant", "content": "and once more"})
        await straggler.put({ref_for(later): later})
    finally:
        await straggler.close()
    assert (await reseal(url, environ=keys(ROTATED), check=True)).in_use == {"k1": KeyUse(1, 0), "k2": KeyUse(8, 5)}
    third = await reseal(url, environ=keys(ROTATED))
    assert third.summary() == f"resealed 1 blobs and 0 nodes under key 'k2'; 0 left under old keys: {REMOVABLE}"
    async with open_store(url, environ=keys(NEW)) as store:
        await read_everything(store, heads)
        assert await store.get([ref_for(late), ref_for(later)]) == {ref_for(late): late, ref_for(later): later}


async def test_reseal_without_a_rotation_is_a_no_op_that_says_so(url: str) -> None:
    await write_old_content(url)
    done = await reseal(url, environ=keys(OLD))
    assert done == Resealed(url, "k1", 0, 0, 0, 0, {"k1": KeyUse(7, 5)}, ("k1",))
    assert done.summary() == "nothing to reseal: all 7 blobs and 5 nodes are under the current key 'k1'"
    assert (await reseal(url, environ=keys(OLD), check=True)).summary() == (
        f"keys in use in the store at {url}: 'k1' (current): 7 blobs, 5 nodes"
    )


# ----------------------------------------------------------------------------------------------- bad keys


async def refused(url: str, environ: dict[str, str]) -> str:
    """The one-line error a reseal with ``environ`` is refused with."""
    with pytest.raises(StoreError) as raised:
        await reseal(url, environ=environ)
    return str(raised.value)


async def test_bad_keys_are_refused_in_one_line_and_change_nothing(url: str, caplog: pytest.LogCaptureFixture) -> None:
    heads = await write_old_content(url)
    assert await refused(url, {}) == (
        f"set {KEYS_ENV} to the workers' keys, the current key first and the older ones after it, to reseal the store "
        "under the current key"
    )
    # The new key alone, before any process opened the store with it: the store's existing refusal.
    assert await refused(url, keys(NEW)) == (
        f"the store at {url} is encrypted with key 'k1', and {KEYS_ENV} holds none that opens it: set {KEYS_ENV} to "
        "the keys it was written with (the workers' keys)"
    )
    async with open_store(url, environ=keys(ROTATED)):
        pass  # a worker restarted with the new key first
    # The old key-only store refuses to be read with the new key alone, as before.
    async with open_store(url, environ=keys(NEW)) as store:
        with pytest.raises(StoreError) as raised:
            await store.get([ref_for(BIG)])
    assert str(raised.value) == (
        f"the store at {url} holds blob {ref_for(BIG)} encrypted with key 'k1', which {KEYS_ENV} does not hold: add "
        "that key back (after the current one)"
    )
    # Now it opens with k2 alone, but k1 sealed what it holds.
    assert await refused(url, keys(NEW)) == (
        f"the store at {url} holds 7 blobs and 5 nodes encrypted with key(s) 'k1', which {KEYS_ENV} does not hold: "
        "list them after the current key and run it again (nothing was resealed)"
    )
    assert (await reseal(url, environ=keys(NEW), check=True)).summary() == (
        f"keys in use in the store at {url}: 'k1' (not in {KEYS_ENV}): 7 blobs, 5 nodes; 2 live events (stream "
        f"previews) under other keys than 'k2'. Add key(s) 'k1' after the current key in {KEYS_ENV} to reseal them"
    )
    # The keys in the wrong order: k2 has been the current key since k1.
    assert await refused(url, keys(f"k1:{K1},k2:{K2}")) == (
        f"the first key of {KEYS_ENV}, 'k1', is not the current key of the store at {url}: processes opened it with "
        "'k2' first since. List the workers' current key first ('k2', then the older ones), or, to go back to 'k1', "
        "make a new key instead (`python -m agent_runner.codec new-key`) and list it first"
    )
    # A worker or client with them so still starts (a deployment rolled back mid-rotation), and says so.
    with caplog.at_level(logging.WARNING, logger="agent_runner.store"):
        async with open_store(url, environ=keys(f"k1:{K1},k2:{K2}")) as store:
            await read_everything(store, heads)
    assert [r.getMessage() for r in caplog.records if r.name == "agent_runner.store"] == [
        f"the first key of {KEYS_ENV}, 'k1', is not the current key of the store at {url}: processes opened it with "
        "'k2' first since. List the workers' current key first ('k2', then the older ones), or, to go back to 'k1', "
        "make a new key instead (`python -m agent_runner.codec new-key`) and list it first; until then, what this "
        "process writes is sealed with the older key"
    ]
    async with open_store(url, environ=keys(ROTATED)) as store:
        await read_everything(store, heads)
    assert (await reseal(url, environ=keys(ROTATED), check=True)).in_use == {"k1": KeyUse(7, 5)}


# ------------------------------------------------------------------------------------------ the command line


def cli(url: str, value: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_runner.cli", "store", "reseal", *args],
        env={"PATH": "/usr/bin:/bin", "AGENT_RUNNER_STORE": url, "HOME": "/nonexistent", KEYS_ENV: value},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_the_cli_checks_reseals_and_refuses_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/store.db"
    await write_old_content(url)
    checked, done, again = cli(url, ROTATED, "--check"), cli(url, ROTATED), cli(url, ROTATED)
    assert [(c.returncode, c.stdout, c.stderr) for c in (checked, done, again)] == [
        (
            0,
            f"keys in use in the store at {url}: 'k1': 7 blobs, 5 nodes; 2 live events (stream previews) under other "
            "keys than 'k2'. Run `agent-runner store reseal` to reseal them under 'k2'\n",
            "",
        ),
        (
            0,
            "resealed 7 blobs and 5 nodes under key 'k2', and removed 2 live events (stream previews) sealed under old "
            f"keys; 0 left under old keys: {REMOVABLE}\n",
            "",
        ),
        (
            0,
            "nothing to reseal: all 7 blobs and 5 nodes are under the current key 'k2'; key(s) 'k1' seal nothing here: "
            f"they can be removed from {KEYS_ENV} once every worker and client has the current key (and no run's "
            "Temporal history needs them)\n",
            "",
        ),
    ]
    refused = cli(url, f"k1:{K1},k2:{K2}")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith(f"error: the first key of {KEYS_ENV}, 'k1', is not the current key of the store")


# --------------------------------------------------------------------------------------------- a real run


async def test_a_runs_transcript_reads_back_whole_with_the_new_key_alone(
    temporal_env: WorkflowEnvironment, fake_api: FakeMessagesAPI, tmp_path: Path
) -> None:
    """A run completes with its worker on k1; the store is resealed under k2; a client with k2 alone reads its
    transcript whole."""
    url = f"sqlite://{tmp_path}/store.db"
    client = await Client.connect(
        temporal_env.client.service_client.config.target_host, data_converter=data_converter({})
    )
    queue = f"store-reseal-{uuid.uuid4()}"
    fake_api.script(end_turn("The vault is in Reykjavik; " + "it is fine. " * 300))
    async with open_store(url, environ=keys(OLD)) as store:
        async with worker_with_store(client, fake_api, queue, store):
            run = await AgentRunner(client, task_queue=queue, store=store).start(
                model="claude-fake-1", max_tokens=64, messages=[{"role": "user", "content": "Where is the vault?"}]
            )
            assert (await run.result()).status == "completed"
            transcript = await run.transcript()
            before = await store.stats()
            # The worker stays up (a run's transcript is asked of it); the reader has the new key alone.
            done = await reseal(url, environ=keys(ROTATED))
            async with open_store(url, environ=keys(NEW)) as reader:
                attached = AgentRunner(client, task_queue=queue, store=reader).attach(run.id)
                assert await attached.transcript() == transcript
    assert (done.blobs, done.nodes, dict(done.in_use)) == (before.blobs, before.nodes, {"k2": KeyUse(4, 3)})
    assert transcript[-1]["content"][0]["text"].startswith("The vault is in Reykjavik; ")


# ---------------------------------------------------------------------------------------------- killed


@pytest.mark.slow
async def test_a_reseal_killed_midway_leaves_every_row_readable_and_finishes_when_run_again(tmp_path: Path) -> None:
    """The command is killed (SIGKILL) once it has resealed some rows: k2,k1 reads everything, and a second run
    reseals exactly what the first did not."""
    import asyncio
    import signal
    import sqlite3

    url = f"sqlite://{tmp_path}/store.db"
    blobs = {ref_for(data): data for data in (canonical({"n": n, "text": "x" * 200}) for n in range(20_000))}
    chain = [{"role": "user", "content": f"message {n}"} for n in range(100)]
    async with open_store(url, environ=keys(OLD)) as store:
        await store.put(blobs)
        head = await Content(store).append(None, chain)
    sealed_by_k2 = b"AR1\x00\x02k2"
    process = subprocess.Popen(
        [sys.executable, "-m", "agent_runner.cli", "store", "reseal"],
        env={"PATH": "/usr/bin:/bin", "AGENT_RUNNER_STORE": url, "HOME": "/nonexistent", KEYS_ENV: ROTATED},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with sqlite3.connect(tmp_path / "store.db", timeout=30) as conn:
            while not conn.execute(
                "SELECT count(*) FROM blobs WHERE substr(data, 1, ?) = ?", (len(sealed_by_k2), sealed_by_k2)
            ).fetchone()[0]:
                assert process.poll() is None, process.communicate()
                await asyncio.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        assert process.wait(timeout=60) == -signal.SIGKILL
    halfway = (await reseal(url, environ=keys(ROTATED), check=True)).in_use
    assert halfway["k1"].blobs + halfway["k2"].blobs == 20_100 and halfway["k2"].blobs < 20_000
    async with open_store(url, environ=keys(ROTATED)) as store:
        assert await store.get(list(blobs)) == blobs
        assert await Content(store).messages(head) == chain
    done = await reseal(url, environ=keys(ROTATED))
    assert (done.blobs, done.nodes, dict(done.in_use)) == (halfway["k1"].blobs, 100, {"k2": KeyUse(20_100, 100)})
    async with open_store(url, environ=keys(NEW)) as store:
        assert await store.get(list(blobs)) == blobs
        assert await Content(store).messages(head) == chain


async def test_a_corrupted_row_under_the_old_key_is_left_as_it_is_and_said(tmp_path: Path) -> None:
    """A blob whose ciphertext changed does not decrypt: it is not resealed (its bytes would be wrong), and the old
    key is not said to be removable while it is there."""
    import sqlite3

    url = f"sqlite://{tmp_path}/store.db"
    heads = await write_old_content(url)
    async with open_store(url, environ=keys(ROTATED)) as store:
        address = store._cipher.address(ref_for(BIG))  # type: ignore[attr-defined]
    with sqlite3.connect(tmp_path / "store.db") as conn:
        (data,) = conn.execute("SELECT data FROM blobs WHERE ref = ?", (address,)).fetchone()
        conn.execute("UPDATE blobs SET data = ? WHERE ref = ?", (data[:-1] + bytes([data[-1] ^ 1]), address))
    done = await reseal(url, environ=keys(ROTATED))
    assert (done.blobs, done.nodes, done.corrupted, dict(done.in_use)) == (
        6,
        5,
        1,
        {"k1": KeyUse(1, 0), "k2": KeyUse(6, 5)},
    )
    assert done.summary() == (
        "resealed 6 blobs and 5 nodes under key 'k2', and removed 2 live events (stream previews) sealed under old "
        "keys; 1 blobs and nodes under old keys do not decrypt (corrupted): left as they are; 1 blobs and 0 nodes are "
        "left under key(s) 'k1' (written meanwhile by a process whose first key is not 'k2', or corrupted): restart "
        f"every worker and client with 'k2' first in {KEYS_ENV}, then run it again"
    )
    async with open_store(url, environ=keys(NEW)) as store:
        content = Content(store)
        assert await content.messages(heads[0]) == MESSAGES
        assert await store.get([ref_for(SHORT, True)]) == {ref_for(SHORT, True): SHORT}
