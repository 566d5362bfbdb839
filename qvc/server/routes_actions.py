"""The action routes of ``qvc serve``: continue and fork a run, fork a thread, reset a thread,
delete a thread or a checkpoint. Each opens a writing store for its one request
(:data:`~qvc.server.deps.Writer`) and closes it before answering, so the server holds no
repository lock between requests; each answers with the new head. The guard refuses them all
in read-only mode (403).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional

from fastapi import APIRouter

from qvc.codec.tagged import from_jsonable
from qvc.errors import InvalidInputError
from qvc.runs import Run, RunRecorder, Runs, thread_of
from qvc.server import models
from qvc.server.deps import State, Writer, revision
from qvc.server.responses import ACTION_ERRORS
from qvc.store import fork
from qvc.store.git_store import GitCheckpointStore
from qvc.types import CheckpointConfig

log = logging.getLogger("qvc")

router = APIRouter(tags=["actions"], responses=ACTION_ERRORS)


def run_action(store: GitCheckpointStore, run: Run, forked: bool) -> Dict[str, Any]:
    """The answer to a run action (:class:`models.RunAction` without ``agent``): ``run`` and its
    thread's head in ``store``; ``forked`` says the run is a new one."""
    thread = thread_of(run.session_id, run.run_id)
    return {"run_id": run.run_id, "session_id": run.session_id, "thread": thread, "head": store.head(thread),
            "checkpoint_id": run.checkpoint_id, "status": run.status.value, "message_index": len(run.messages),
            "forked": forked, "forked_from_run_id": run.forked_from_run_id,
            "forked_from_message_index": run.forked_from_message_index}


def thread_action(store: GitCheckpointStore, thread: str, deleted: Optional[str] = None) -> Dict[str, Any]:
    """The answer to a thread action (:class:`models.ThreadAction`): ``thread``'s head in
    ``store`` now (all ``None`` once the thread is gone) and what was ``deleted``, if anything."""
    head = store.head(thread)
    info = store.commit_info(head) if head else None
    return {"thread": thread, "head": head, "id": info.checkpoint_id if info else None,
            "step": info.step if info else None, "deleted": deleted}


def record(agent: Callable[[Any], Any], rec: RunRecorder, store: GitCheckpointStore) -> None:
    """The body of an agent's thread: ``agent(rec)`` records the continuation; an exception
    leaving it finishes the run ERROR (as ``with rec:`` does) and is logged, and the server goes
    on. ``store`` (the continuation's writing store) is closed at the end either way."""
    try:
        with rec:
            agent(rec)
    except Exception:  # noqa: BLE001 - recorded as the run's ERROR checkpoint; the server goes on
        log.exception("qvc serve: the agent failed on run %s", rec.run_id)
    finally:
        store.close()


@router.post("/api/runs/{run_id}/continue", response_model=models.RunAction)
def continue_run(open_writer: Writer, state: State, run_id: str,
                 body: Optional[models.ContinueRequest] = None) -> Dict[str, Any]:
    """Continue a run with `Runs.continue_run`'s rules.

    In place for RUNNING (a stale owner is taken over), ERROR, PAUSED and PENDING runs, where a
    boundary before the end rewinds the run (the old tail stays as a superseded line); in a new
    run forked at the boundary for COMPLETED and REGENERATED runs or `fork: true`. CANCELLED
    runs and runs owned by a live worker are refused (409). The continuation's first
    checkpoint (`input` as a user message) is durable when this answers. Then, if the server
    has an agent (`qvc serve --agent`), the agent records the continuation in the background
    (`agent: true`; the run is owned by this server until it finishes); otherwise the
    continuation is detached (`RunRecorder.close`): RUNNING with no live owner, for an agent
    to pick up with `Runs.continue_run(run_id)`, which records the takeover.
    """
    body = body or models.ContinueRequest()
    # Not `with`: with an agent, the store stays open for the agent's thread, which closes it.
    store = open_writer()
    try:
        rec = Runs(store).continue_run(run_id, from_jsonable(body.input, "input"), body.continue_from,
                                       fork=body.fork, requirements=body.requirements)
        answer = run_action(store, rec.run, rec.run.run_id != run_id)
    except BaseException:
        store.close()
        raise
    if state.agent is None:
        try:
            rec.close()
        finally:
            store.close()
        return {**answer, "agent": False}
    threading.Thread(target=record, args=(state.agent, rec, store), daemon=True,
                     name=f"qvc-agent-{rec.run_id}").start()
    return {**answer, "agent": True}


@router.post("/api/runs/{run_id}/fork", response_model=models.RunAction)
def fork_run(open_writer: Writer, run_id: str, body: Optional[models.ForkRunRequest] = None) -> Dict[str, Any]:
    """A new PENDING run whose conversation is this run's up to `at` (pair-safe), `input` appended."""
    body = body or models.ForkRunRequest()
    with open_writer() as store:
        run = Runs(store).fork(run_id, body.at, input=from_jsonable(body.input, "input"), new_run_id=body.new_run_id)
        return {**run_action(store, run, True), "agent": False}


@router.post("/api/fork", response_model=models.ThreadAction, response_model_exclude_unset=True)
def fork_thread(open_writer: Writer, body: models.ForkThreadRequest) -> Dict[str, Any]:
    """Fork a new thread from a checkpoint (`qvc branch NEW CHECKPOINT`)."""
    with open_writer() as store:
        fork.fork_thread(store, revision(store, body.checkpoint), body.thread)
        return thread_action(store, body.thread)


@router.post("/api/reset", response_model=models.ThreadAction, response_model_exclude_unset=True)
def reset(open_writer: Writer, body: models.ResetRequest) -> Dict[str, Any]:
    """Time travel: move a thread's head to one of its checkpoints; the line left behind is kept."""
    with open_writer() as store:
        store.reset(body.thread, revision(store, body.to))
        return thread_action(store, body.thread)


@router.delete("/api/threads/{thread:anything}", response_model=models.ThreadAction)
def delete_thread(open_writer: Writer, thread: str) -> Dict[str, Any]:
    """Delete a thread with its superseded lines (data stays until `qvc gc --prune`)."""
    with open_writer() as store:
        head = store.head(thread)
        store.delete_thread(thread)
        return thread_action(store, thread, head)


@router.delete("/api/checkpoints/{name:anything}", response_model=models.ThreadAction)
def delete_checkpoint(open_writer: Writer, name: str) -> Dict[str, Any]:
    """Delete one checkpoint; its children are re-parented onto its parent."""
    with open_writer() as store:
        sha = revision(store, name)
        info = store.commit_info(sha)
        if info.thread_id is None:
            raise InvalidInputError(f"checkpoint {name!r} belongs to no thread")
        store.delete(CheckpointConfig(info.thread_id, sha))
        return thread_action(store, info.thread_id, info.checkpoint_id)
