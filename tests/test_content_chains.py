"""A worker's remembered transcripts: later heads share and extend one list, and every head still reads as stored.

``Content`` remembers a transcript's refs so that a run's next model call on the same worker reads nothing from the
store; the heads of one transcript share one list, so an append costs its new messages only however long the run
(a 100,000-iteration run used to copy its whole transcript twice per model call). These tests hold every head, read
through the worker that wrote it, to what a fresh worker reads from the store: after appends from the newest head,
from an older head (a fork), and of the same messages again (another attempt of the same model call).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from anthropic import beta_async_tool

import agent_runner.content as content_module
from agent_runner.client import AgentRunner
from agent_runner.content import Content
from agent_runner.store import ContentStore, open_store
from agent_runner.testing import FakeMessagesAPI, Reply, end_turn, text, tool_use
from tests.conftest import WorkerFactory


def msg(n: int, text: str = "m") -> dict[str, Any]:
    return {"role": "user" if n % 2 else "assistant", "content": f"{text}{n}"}


class CountingStore:
    """Counts the chain reads of a store (the only way a worker learns a transcript it did not write)."""

    def __init__(self, store: ContentStore) -> None:
        self.store = store
        self.chain_reads = 0
        original = store.chain

        async def chain(head: str) -> list[str]:
            self.chain_reads += 1
            return await original(head)

        store.chain = chain  # type: ignore[method-assign]


async def as_stored(store: ContentStore, head: str | None) -> list[dict[str, Any]]:
    """The transcript as a worker that never saw it reads it: from the store alone."""
    return await Content(store).messages(head)


async def test_every_head_reads_as_stored_after_appends_forks_and_repeated_attempts() -> None:
    store = open_store("memory:")
    content = Content(store)
    trunk = [msg(i) for i in range(1, 6)]
    heads: dict[str, tuple[str | None, list[dict[str, Any]]]] = {}

    h3 = await content.append(None, trunk[:3])
    heads["h3"] = (h3, trunk[:3])
    h5 = await content.append(h3, trunk[3:5])
    heads["h5"] = (h5, trunk[:5])
    # Another attempt of the same call appends the same messages to the same head: the same head, nothing copied.
    assert await content.append(h3, trunk[3:5]) == h5
    # A fork from the older head h3 (a retried turn, an edit) must not change what h5 holds.
    fork = [msg(10, "fork"), msg(11, "fork")]
    f5 = await content.append(h3, fork)
    heads["f5"] = (f5, trunk[:3] + fork)
    # The newest head of each branch goes on.
    h6 = await content.append(h5, [msg(6)])
    heads["h6"] = (h6, [*trunk, msg(6)])
    f6 = await content.append(f5, [msg(12, "fork")])
    heads["f6"] = (f6, [*trunk[:3], *fork, msg(12, "fork")])
    # A fork of one message less than a branch holds, which that branch's list goes on past.
    g4 = await content.append(h3, [trunk[3]])
    heads["g4"] = (g4, trunk[:4])
    g5 = await content.append(g4, [msg(20, "g")])
    heads["g5"] = (g5, [*trunk[:4], msg(20, "g")])

    for name, (head, expected) in heads.items():
        assert await content.messages(head) == expected, name
        assert await content.length(head) == len(expected), name
        assert await content.messages(head, start=2) == expected[2:], name
        assert await as_stored(store, head) == expected, name


@pytest.mark.parametrize("turns", [50])
async def test_a_run_appending_turn_after_turn_reads_no_chain_from_the_store(turns: int) -> None:
    store = open_store("memory:")
    counting = CountingStore(store)
    content = Content(store)
    head, replies = None, None
    expected: list[dict[str, Any]] = []
    for n in range(turns):
        # A model call: how long the transcript is, its new messages, then the turn and the reply appended together.
        assert await content.length(head) == len(expected)
        assert await content.messages(head, start=max(0, len(expected) - 1)) == expected[-1:]
        turn = [msg(2 * n + 1), msg(2 * n + 2)]
        head, replies = await content.append_many([(head, turn), (replies, [turn[-1]])])
        expected += turn
    assert counting.chain_reads == 0
    assert await as_stored(store, head) == expected
    assert await as_stored(store, replies) == expected[1::2]
    assert counting.chain_reads == 2  # the fresh workers of `as_stored`


async def test_a_worker_keeping_many_runs_moving_at_once_reads_none_of_their_transcripts_back() -> None:
    """A thousand runs' model calls taking turns on a worker: each finds its transcript where its last call left it."""
    store = open_store("memory:")
    counting = CountingStore(store)
    content = Content(store)
    heads: list[str | None] = [None] * 1_000
    for turn in range(3):
        for run, head in enumerate(heads):
            assert await content.length(head) == 2 * turn
            (heads[run],) = await content.append_many([(head, [msg(2 * turn + 1, f"r{run}-"), msg(2 * turn + 2)])])
    assert counting.chain_reads == 0
    assert await as_stored(store, heads[0]) == [msg(1, "r0-"), msg(2), msg(3, "r0-"), msg(4), msg(5, "r0-"), msg(6)]


async def test_a_worker_remembers_transcripts_up_to_a_bound_on_their_refs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``CHAIN_CACHE_REFS`` refs the least recently used transcripts are forgotten (and read again if needed)."""
    monkeypatch.setattr(content_module, "CHAIN_CACHE_REFS", 100)
    store = open_store("memory:")
    counting = CountingStore(store)
    content = Content(store)
    heads = [await content.append(None, [msg(n, f"t{t}-") for n in range(1, 11)]) for t in range(30)]
    for head in heads[20:]:  # the last ten: 100 refs
        assert await content.length(head) == 10
    assert counting.chain_reads == 0
    assert await content.length(heads[19]) == 10  # forgotten: read back, and now remembered in place of heads[20]
    assert counting.chain_reads == 1
    assert await content.length(heads[29]) == 10
    assert await content.length(heads[20]) == 10
    assert counting.chain_reads == 2


async def test_an_append_to_a_long_transcript_allocates_for_its_new_messages_only() -> None:
    """Memory, not time: one more turn of a 20,000-message transcript keeps a few KB, not another copy of its refs."""
    store = open_store("memory:")
    content = Content(store)
    head = await content.append(None, [msg(n) for n in range(20_000)])
    head = await content.append(head, [msg(20_000)])  # warm: the first append after a bulk one may grow the list
    tracemalloc.start()
    try:
        await content.append(head, [msg(20_001)])
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # What the append leaves allocated: its message and ref (and at worst the list's growth by an eighth), where a
    # remembered copy of the transcript's refs alone would be 160,000 bytes of pointers.
    assert kept < 60_000


@pytest.mark.slow
async def test_a_worker_caching_many_small_messages_keeps_to_its_cache_budget(tmp_path: Path) -> None:
    """The cache's budget bounds its memory, not only its JSON bytes: 20,000 small messages in a 2 MB cache."""
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    content = Content(store, cache_bytes=2_000_000)
    head: str | None = None
    tracemalloc.start()
    try:
        for n in range(0, 20_000, 100):
            head = await content.append(head, [msg(i) for i in range(n, n + 100)])
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Besides the cache, the transcript's refs (about 100 bytes a message). The cache keeps about its budget; it
    # used to keep all 20,000 decoded messages (~1 KB each), since their JSON fitted in it.
    assert kept < 2_000_000 + 20_000 * 150
    assert await as_stored(store, head) == [msg(i) for i in range(20_000)]
    await store.close()


@beta_async_tool
async def long_page(n: int) -> str:
    """Fetch a page too long to carry inline.

    Args:
        n: Which page.
    """
    return f"page {n} " + "p" * 6000


@pytest.mark.parametrize("thread", [True, False], ids=["thread", "full_history"])
async def test_a_run_on_one_worker_reads_nothing_back_from_the_store(
    runner: AgentRunner, worker: WorkerFactory, fake_api: FakeMessagesAPI, thread: bool
) -> None:
    """What a worker stores it keeps (named by content, it cannot be stale): its model calls read no blob and no
    chain from the store, though its replies' long text and its tools' long results are stored apart and sent back."""
    store = open_store("memory:")
    counting = CountingStore(store)
    original_get = store.get
    gets: list[str] = []

    async def get(refs: Any) -> dict[str, bytes]:
        gets.extend(refs)
        return await original_get(refs)

    store.get = get  # type: ignore[method-assign]
    said = "I will read two pages. " + "t" * 3000
    fake_api.script(
        Reply([text(said), tool_use("toolu_1", "long_page", {"n": 1})], "tool_use"),
        Reply([tool_use("toolu_2", "long_page", {"n": 2})], "tool_use"),
        end_turn("Read."),
    )
    async with worker(long_page, store=store):
        run = await runner.start(
            model="claude-fake-1",
            max_tokens=1024,
            messages=[{"role": "user", "content": "Read."}],
            tools=[long_page],
            thread=thread,
        )
        assert (await run.until_done()).content[0].text == "Read."  # type: ignore[union-attr]
    assert gets == []
    assert counting.chain_reads == 0
    results = [
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"page {n} " + "p" * 6000}],
        }
        for n in (1, 2)
    ]
    first_reply = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": said},
            {"type": "tool_use", "id": "toolu_1", "name": "long_page", "input": {"n": 1}},
        ],
    }
    if thread:
        assert [body["messages"] for body in fake_api.bodies()[1:]] == [[results[0]], [results[1]]]
    else:
        second_reply = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_2", "name": "long_page", "input": {"n": 2}}],
        }
        assert fake_api.bodies()[2]["messages"][1:] == [first_reply, results[0], second_reply, results[1]]
