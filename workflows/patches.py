"""One patch marker a new run records for the patches every new run used to record one by one (issue 14).

Every ``workflow.patched(id)`` a run asks for the first time records a marker and, in sdk-core, an upsert of the
``TemporalChangeVersion`` search attribute listing every id so far: four such patches, asked by every new run, cost it
8 events and about 1.3 KB of history, and 8 server writes. ``UMBRELLA_PATCH`` stands for them all: a run that began on
this code asks for it first and records one marker and one upsert, and never asks for the patches it implies.

Why this is safe (``workflow.patched`` answers once per id per execution, memoized; on replay an id is ``True`` only if
its marker is in the history):

- a run recorded before: the umbrella is not in its history, so it answers ``False`` and the old ids decide, as they
  did when the run was recorded;
- a run that began on this code: the umbrella is asked at the run's first site, before any old id, and answers
  ``True`` there and on every replay; the old ids are never asked, so no marker of theirs is expected;
- a run begun on older code still running when its workers are upgraded: its first site here is replayed (the umbrella
  answers ``False`` and stays so), so the old ids decide, as recorded, and go on deciding past the replay;
- a run begun on older code that reached none of the sites before the upgrade (its first workflow task not yet
  done; a new run's first site is its ``describe_tools`` lookup, ``tool_lookup.py``): the umbrella answers ``True`` at
  its first site (asked live), so it runs as a new run, which is what the old ids would have chosen anyway.

A worker of older code must not take a run begun here (it would not know the umbrella): upgrade every worker first,
as for any patch.
"""

from __future__ import annotations

from temporalio import workflow

UMBRELLA_PATCH = "runs-since-2026-12-01"
"""``workflow.patched`` id of a run begun on the code of 2026-12-01 or later: it implies every patch in ``IMPLIED``,
and ``describe_tools`` as a local activity (``tool_lookup.py``)."""

IMPLIED = (
    "activity-inputs-without-run-id",
    "lean-iteration-history",
    "live-log-and-short-model-heartbeat",
    "run-result-carries-its-last-status",
)
"""The patches ``UMBRELLA_PATCH`` implies: the ones every new run recorded before it (their ids are durable, so they
are spelled out here as their modules spell them; ``tests/test_umbrella_patch.py`` checks both agree)."""


COMPACT_RESULTS_PATCH = "compact-tool-results"
"""``workflow.patched`` id of a run begun on the code since its model calls' turns send their stored tool results as
pairs (``contract/tool_result_refs.py``), and the umbrella of those runs: it implies ``UMBRELLA_PATCH`` as that one
implies ``IMPLIED``, by the same argument, so a new run still records one marker. It is asked first at a run's first
site (``begun_since``, ``since``): a run begun on older code answers ``False`` there on replay, and so for good."""


def compact_results() -> bool:
    """Whether this run's model calls send their stored tool results compact (it records ``COMPACT_RESULTS_PATCH``)."""
    return workflow.patched(COMPACT_RESULTS_PATCH)


def implied(old_id: str) -> bool:
    """``workflow.patched(old_id)`` for any patch older than ``COMPACT_RESULTS_PATCH``, which implies them all.

    ``request-shape-as-the-sdk``, which shipped with it, counts as older. A run begun since never asks an older patch,
    so it records no marker but its umbrella's. That also keeps a run from first asking a patch right after a local
    activity (``describe_tools``, when it begins or at an ``add_tools``): asked there, its marker is recorded in the
    workflow task after the one whose replay resolves the lookup, and a replay may ask before it knows the marker, a
    non-determinism error. A run recorded before asks each patch as it did. Patches newer than the umbrella are asked
    with ``workflow.patched``.
    """
    return compact_results() or workflow.patched(old_id)


def begun_since() -> bool:
    """Whether this run began on this code (it records ``UMBRELLA_PATCH``, or the newer ``COMPACT_RESULTS_PATCH``).

    For what runs begun since do that no run did before (``tool_lookup.py``: ``describe_tools`` as a local activity).
    """
    return compact_results() or workflow.patched(UMBRELLA_PATCH)


def since(old_id: str) -> bool:
    """``workflow.patched(old_id)``, answered by ``UMBRELLA_PATCH`` first: ``True`` for a run begun on this code.

    Args:
        old_id: One of the patches in ``IMPLIED``.

    Returns:
        Whether the run takes the patched path: always for a run that records the umbrella, else as ``old_id`` was
        (or will be) recorded.
    """
    return begun_since() or workflow.patched(old_id)
