"""Agent runs on a qvc store: tool-batch checkpoints, crash recovery, continue, fork and a timeline.

A **run** is one agent loop: a conversation (``messages``, with assistant tool calls and tool
results linked by ``tool_call_id``), the tool executions, HITL requirements, the session state,
metrics, the final ``content`` and a :class:`RunStatus`. Each run is the thread
``run/<session_id>/<run_id>`` of a :class:`~qvc.GitCheckpointStore`; each checkpoint of the run
is one commit on it.

Recording (:meth:`Runs.start` returns a :class:`RunRecorder`)::

    runs = Runs(store)
    with runs.start("What is 6*7?", system="You are terse.", cadence="tool-batch") as rec:
        reply = model(rec.run.messages)            # the agent loop owns the model and the tools
        rec.add_message(reply)
        for call in reply.tool_calls:
            rec.tool_result(call, tools[call.name](**call.arguments))
        rec.after_tool_batch()                     # one checkpoint per batch (cadence permitting)
        rec.complete(model(rec.run.messages).content)

K tool batches give K+1 checkpoints (K after the batches, one terminal). An exception leaving
the ``with`` block writes an ERROR checkpoint holding every message recorded so far, including
the system and user messages when the failure comes before the first batch.

**Storage layout.** The small fields (``run`` identity and lineage, ``status``, ``content``,
``session_state``, ``metrics``, ``requirements``, ``owner``, ``error``, ``takeovers``) are one
blob each. The conversation is stored as *segments*: field ``log.<n>`` holds the messages and
tool executions that checkpoint ``n`` of the line added, so a checkpoint writes what its batch
added plus a tree and a commit, and forks share their prefix's blobs. A tool execution whose
result equals its tool message's content is stored once. Once a line has 128 segments, the
oldest 64 are sealed into one ``sealed.<n>`` field (written once), so the root tree stays small
on long runs.

**Ownership.** A RUNNING run has an :class:`Owner` (pid, host, start time, heartbeat). The owning
recorder holds an ``flock`` on ``<repo>/qvc/runs/<thread>.lock`` for as long as it records; the
kernel drops it when the process dies, so on the same host a crashed owner is told from a live
one exactly. Owners on other hosts are judged by their heartbeat (``lease`` seconds).
Continuing a RUNNING run whose owner is live raises :class:`~qvc.errors.RunOwnedError`; taking
over a stale one writes a ``takeover`` checkpoint recording the previous owner.

**Durability.** Every checkpoint is one ``put``: durable when it returns in the store's SYNC
mode (see :mod:`qvc.plumbing.durability`). A failed checkpoint raises; it is never swallowed.

**Time travel never destroys.** Continuing from an earlier boundary in place makes the cut
checkpoint the run's new head; the line it replaces stays reachable (``timeline`` lists it with
``current=False``). Cuts are pair-safe (:func:`safe_truncation_index`).

**Modules.** :mod:`~qvc.runs.ids` (run, session and thread ids), :mod:`~qvc.runs.model` (the
run model and its JSON form), :mod:`~qvc.runs.boundaries` (pair-safe cuts),
:mod:`~qvc.runs.segments` (the conversation's checkpoint fields), :mod:`~qvc.runs.codec` (runs
to checkpoint state and back), :mod:`~qvc.runs.ownership` (run locks, owner liveness),
:mod:`~qvc.runs.queries` (reading runs: lists, history, timelines, snapshots),
:mod:`~qvc.runs.recorder` (:class:`RunRecorder`), :mod:`~qvc.runs.lifecycle` (:class:`Runs`:
start, continue, fork, regenerate, copy), :mod:`~qvc.runs.failures` (checkpoint failures an
adapter records for ``qvc status``, where its framework only logs them) and
:mod:`~qvc.runs.viewer` (how ``qvc show/diff/log -p/blame`` and ``qvc serve`` show a run
checkpoint: its conversation, without the storage bookkeeping). Each imports only the store layer and below
(``qvc.store``, ``qvc.plumbing``, ``qvc.errors``, ``qvc.types``) and the modules listed before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qvc.lazy import exports

# Each name is imported from its module on first use (qvc.lazy): reading a run's numbers
# (``qvc log``) needs qvc.runs.ids and qvc.runs.queries, not the recorder. The ``X as X`` names
# are importable from qvc.runs as before the split, outside __all__.
_MODEL = ("HISTORY_SKIP", "Cadence", "Message", "Owner", "OwnerStatus", "Requirement", "Run", "RunStatus",
          "RunSummary", "Snapshot", "TimelineEntry", "ToolCall", "ToolExecution", "PREVIEW_CHARS", "TERMINAL")
_HOMES = {
    **dict.fromkeys(_MODEL, "qvc.runs.model"),
    **dict.fromkeys(("ContinueFrom", "referenced_tool_call_ids", "resolve_continue_from", "safe_truncation_index"),
                    "qvc.runs.boundaries"),
    **dict.fromkeys(("THREAD_PREFIX", "parse_run_ref", "thread_of"), "qvc.runs.ids"),
    "Runs": "qvc.runs.lifecycle", "run_revision": "qvc.runs.lifecycle",
    "RunRecorder": "qvc.runs.recorder",
    "GROUP": "qvc.runs.segments",
}
__getattr__, __dir__ = exports(__name__, _HOMES)

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports these
    from qvc.runs.boundaries import ContinueFrom as ContinueFrom
    from qvc.runs.boundaries import referenced_tool_call_ids, resolve_continue_from, safe_truncation_index
    from qvc.runs.ids import THREAD_PREFIX as THREAD_PREFIX
    from qvc.runs.ids import parse_run_ref, thread_of
    from qvc.runs.lifecycle import Runs, run_revision
    from qvc.runs.model import (
        HISTORY_SKIP,
        Cadence,
        Message,
        Owner,
        OwnerStatus,
        Requirement,
        Run,
        RunStatus,
        RunSummary,
        Snapshot,
        TimelineEntry,
        ToolCall,
        ToolExecution,
    )
    from qvc.runs.model import PREVIEW_CHARS as PREVIEW_CHARS
    from qvc.runs.model import TERMINAL as TERMINAL
    from qvc.runs.recorder import RunRecorder
    from qvc.runs.segments import GROUP as GROUP


__all__ = [
    "Cadence", "HISTORY_SKIP", "Message", "Owner", "OwnerStatus", "Requirement", "Run", "RunRecorder", "RunStatus",
    "RunSummary", "Runs", "Snapshot", "TimelineEntry", "ToolCall", "ToolExecution", "parse_run_ref",
    "referenced_tool_call_ids", "resolve_continue_from", "run_revision", "safe_truncation_index", "thread_of",
]
