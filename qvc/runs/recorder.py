"""The recorder: one leg of a run, written as checkpoints while the agent loop adds messages and tool results.

Imports :mod:`qvc.store`, :mod:`qvc.types`, :mod:`qvc.errors` and :mod:`qvc.runs.ids`, ``model``,
``segments``, ``codec`` and ``ownership``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence

from qvc.errors import InvalidInputError, RunStateError
from qvc.logs import log
from qvc.runs.codec import encode_state
from qvc.runs.ids import check_id, new_id
from qvc.runs.model import Cadence, Message, Requirement, Run, RunStatus, ToolCall, ToolExecution
from qvc.runs.ownership import RunLock
from qvc.runs.segments import Segment
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig

#: Called as ``(source_run_id, by_run_id)`` when a regeneration that replaces its source completes.
MarkRegenerated = Callable[[str, str], None]


class RunRecorder:
    """Records one leg of a run: the agent loop adds messages and tool results, the recorder checkpoints.

    Get one from :meth:`Runs.start`, :meth:`Runs.continue_run` or :meth:`Runs.regenerate`. It
    owns the run (holds its lock) until :meth:`complete`, :meth:`pause`, :meth:`cancel`,
    :meth:`fail` or :meth:`close`. Messages and tool executions are append-only: add them
    through the recorder. ``run`` is the live, in-memory run; ``checkpoints`` lists the ids this
    recorder wrote. Every checkpoint method returns the new checkpoint id (or ``None`` when the
    cadence says no) once it is durable, and raises what :meth:`GitCheckpointStore.put` raises.
    """

    def __init__(self, store: GitCheckpointStore, thread: str, run: Run, segments: List[Segment],
                 parent: Optional[str], step: int, lock: Optional[RunLock], heartbeat_interval: Optional[float],
                 mark_regenerated: Optional[MarkRegenerated] = None, *, rewinds: Optional[str] = None):
        """Made by :class:`~qvc.runs.Runs`: ``segments``, ``parent`` and ``step`` continue the stored line,
        ``lock`` is the run lock this recorder owns (released when it finishes or closes), and
        ``mark_regenerated`` is called when a regeneration that replaces its source completes.
        ``rewinds``: the thread's head (commit SHA) when ``parent`` is an older checkpoint of it
        (a continue that rewinds): the first checkpoint supersedes that head's line, as asked
        (time travel, see :meth:`GitCheckpointStore.put`), and conflicts if the head moved."""
        self._store = store
        self._mark_regenerated = mark_regenerated
        self.thread_id = thread
        self.run = run
        self._segments = segments
        self._persisted = (sum(len(s.messages) for s in segments), sum(len(s.tools) for s in segments))
        self._parent = parent
        self._rewinds = rewinds
        self._step = step
        self._lock = lock
        self._since = self._persisted
        self.checkpoints: List[str] = []
        self.finished = False
        self._started = time.monotonic()
        self._beat_lock = threading.Lock()
        self._stop = threading.Event()
        self._beater: Optional[threading.Thread] = None
        if heartbeat_interval is not None:
            if not isinstance(heartbeat_interval, (int, float)) or heartbeat_interval <= 0:
                raise InvalidInputError(f"heartbeat_interval must be a positive number, not {heartbeat_interval!r}")
            self._beater = threading.Thread(target=self._beat, args=(float(heartbeat_interval),), daemon=True,
                                            name=f"qvc-heartbeat-{run.run_id}")
            self._beater.start()

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def cadence(self) -> Cadence:
        return self.run.cadence

    @property
    def last_checkpoint_id(self) -> Optional[str]:
        return self._parent

    def __repr__(self) -> str:
        return f"RunRecorder({self.run.run_id!r}, {self.run.status.value}, {len(self.run.messages)} messages)"

    # -- recording ----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.finished:
            raise RunStateError(f"run {self.run.run_id!r} recorder is finished ({self.run.status.value})")

    def add_message(self, message: Message | Mapping[str, Any]) -> Message:
        """Append a message (in flight until the next checkpoint). Raises :class:`InvalidInputError`."""
        self._check_open()
        msg = message if isinstance(message, Message) else Message.from_dict(message)
        self.run.messages.append(msg)
        return msg

    def add_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> List[Message]:
        return [self.add_message(m) for m in messages]

    def add_tool_execution(self, execution: ToolExecution | Mapping[str, Any]) -> ToolExecution:
        """Append a tool execution (use :meth:`tool_result` to add its tool message too)."""
        self._check_open()
        te = execution if isinstance(execution, ToolExecution) else ToolExecution.from_dict(execution)
        self.run.tools.append(te)
        return te

    def tool_result(self, call: ToolCall | str, result: Any, *, error: bool = False,
                    tool_name: Optional[str] = None, started_at: Optional[float] = None) -> Message:
        """Record a tool call's result: a ``tool`` message answering ``call`` and a :class:`ToolExecution`.

        ``result`` is the message content as is when it is a string, else its ``repr``; the
        execution keeps ``result`` itself. ``error=True`` marks a failed call (the run goes on).
        """
        self._check_open()
        if isinstance(call, ToolCall):
            call_id, name, args = call.id, tool_name or call.name, call.arguments
        else:
            call_id, name, args = check_id(call, "tool call id"), tool_name or "", {}
            for m in reversed(self.run.messages):
                found = next((c for c in m.tool_calls if c.id == call_id), None)
                if found is not None:
                    name, args = tool_name or found.name, found.arguments
                    break
        content = result if isinstance(result, str) else repr(result)
        msg = self.add_message(Message("tool", content, tool_call_id=call_id, tool_name=name, tool_call_error=error))
        self.add_tool_execution(ToolExecution(call_id, name, dict(args), result, error, started_at, time.time()))
        self.run.metrics["tool_calls"] = self.run.metrics.get("tool_calls", 0) + 1
        return msg

    def pending_tool_calls(self) -> List[ToolCall]:
        """The tool calls of the conversation that have no result yet (for example after resuming a
        run checkpointed per tool call in the middle of a batch)."""
        answered = {m.tool_call_id for m in self.run.messages if m.role == "tool"}
        return [c for m in self.run.messages for c in m.tool_calls if c.id not in answered]

    def add_metrics(self, **numbers: Any) -> None:
        """Add numbers to the run's metrics (``input_tokens=12``...)."""
        for key, value in numbers.items():
            self.run.metrics[key] = self.run.metrics.get(key, 0) + value

    # -- checkpoints --------------------------------------------------------------------------

    def put_checkpoint(self, reason: str, status: RunStatus, extra: Optional[Mapping[str, Any]] = None) -> str:
        """Write a checkpoint of the run as it is now, with ``status`` (no open or cadence check); returns its id."""
        run = self.run
        pm, pt = self._persisted
        if len(run.messages) > pm or len(run.tools) > pt:
            self._segments.append(Segment([m.to_dict() for m in run.messages[pm:]],
                                           [t.to_dict() for t in run.tools[pt:]]))
            self._persisted = (len(run.messages), len(run.tools))
        run.status = status
        now = time.time()
        if run.owner is not None:
            run.owner.heartbeat_at = now
        last = run.messages[-1] if run.messages else None
        checkpoint = Checkpoint(id=new_id(), thread_id=self.thread_id, step=self._step,
                                state_data=encode_state(run, self._segments), parent_id=self._parent)
        metadata = {"source": "run", "run_id": run.run_id, "session_id": run.session_id, "status": status.value,
                    "reason": reason, "message_index": len(run.messages), "time": now,
                    "role": last.role if last else None, "preview": last.preview if last else ""}
        if extra:
            metadata.update(extra)
        with self._beat_lock:
            if self._rewinds is not None:
                self._store.put(CheckpointConfig(self.thread_id), checkpoint, metadata, expected_head=self._rewinds)
            else:
                self._store.put(CheckpointConfig(self.thread_id), checkpoint, metadata)
            self._parent, self._rewinds = checkpoint.id, None
        self._step += 1
        self._since = self._persisted
        run.checkpoint_id = checkpoint.id
        run.updated_at = now
        self.checkpoints.append(checkpoint.id)
        return checkpoint.id

    def _new_since_checkpoint(self) -> bool:
        return (len(self.run.messages), len(self.run.tools)) != self._since

    def checkpoint(self, reason: str = "manual") -> str:
        """Write a RUNNING checkpoint now, whatever the cadence."""
        self._check_open()
        return self.put_checkpoint(reason, RunStatus.RUNNING)

    def after_tool_call(self) -> Optional[str]:
        """Call after each tool call's result is recorded: checkpoints with cadence ``tools``."""
        self._check_open()
        if self.run.cadence is Cadence.TOOLS and self._new_since_checkpoint():
            return self.put_checkpoint("tool", RunStatus.RUNNING)
        return None

    def after_tool_batch(self) -> Optional[str]:
        """Call after a tool batch's results are recorded, before the next model call: checkpoints
        with cadence ``tool-batch`` (and ``tools``, if the last call was not checkpointed yet)."""
        self._check_open()
        if self.run.cadence is not Cadence.RUNS and self._new_since_checkpoint():
            return self.put_checkpoint("tool-batch", RunStatus.RUNNING)
        return None

    def heartbeat(self) -> None:
        """Refresh the owner's heartbeat without a new checkpoint (a pending write on the latest one).

        Only needed for owners judged from another host (see :class:`Runs` ``lease``). A no-op
        before the first checkpoint or after the run finished.
        """
        with self._beat_lock:
            if self.finished or self._parent is None or self.run.owner is None or not self.checkpoints:
                return
            now = time.time()
            self._store.put_writes(CheckpointConfig(self.thread_id, self._parent),
                                        [("owner", {"token": self.run.owner.token, "heartbeat_at": now})],
                                        task_id="qvc.heartbeat")

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.heartbeat()
            except Exception as exc:  # noqa: BLE001 - a heartbeat failure must not kill the run
                log.warning("run %s: heartbeat failed: %s", self.run.run_id, exc)

    # -- finishing ----------------------------------------------------------------------------

    def _finish(self, status: RunStatus, reason: str) -> Run:
        self._check_open()
        run = self.run
        owner, run.owner = run.owner, None
        run.metrics["duration"] = run.metrics.get("duration", 0.0) + (time.monotonic() - self._started)
        try:
            self.put_checkpoint(reason, status)
        except BaseException:
            run.owner = owner
            raise
        self.finished = True
        self._release(unlink=True)
        if (status is RunStatus.COMPLETED and run.regenerated_from and run.replace_original
                and self._mark_regenerated is not None):
            self._mark_regenerated(run.regenerated_from, run.run_id)
        return run

    def complete(self, content: Any = None) -> Run:
        """Finish COMPLETED with ``content`` (default: the last assistant message's content)."""
        if content is None:
            content = next((m.content for m in reversed(self.run.messages) if m.role == "assistant"), None)
        self.run.content = content
        return self._finish(RunStatus.COMPLETED, "end")

    def pause(self, requirements: Sequence[Requirement | Mapping[str, Any]]) -> Run:
        """Finish PAUSED, waiting on human-in-the-loop ``requirements`` (resolve them in ``continue_run``)."""
        self._check_open()
        self.run.requirements = [Requirement.from_dict(r) for r in requirements]
        return self._finish(RunStatus.PAUSED, "paused")

    def cancel(self, reason: Optional[str] = None) -> Run:
        """Finish CANCELLED (a cancelled run cannot be continued, only forked)."""
        self._check_open()
        self.run.error = {"type": "cancelled", "message": reason or ""}
        return self._finish(RunStatus.CANCELLED, "cancelled")

    def fail(self, error: BaseException | str) -> Run:
        """Finish ERROR: every message recorded so far is kept in the ERROR checkpoint."""
        self._check_open()
        if isinstance(error, BaseException):
            self.run.error = {"type": type(error).__name__, "message": str(error)}
        else:
            self.run.error = {"type": "error", "message": str(error)}
        return self._finish(RunStatus.ERROR, "error")

    def _release(self, unlink: bool = False) -> None:
        self._stop.set()
        if self._beater is not None and self._beater is not threading.current_thread():
            self._beater.join()
        if self._lock is not None:
            self._lock.release(unlink=unlink)

    def close(self) -> None:
        """Stop recording without finishing: in-flight messages are checkpointed (reason ``detach``),
        the run stays RUNNING and its lock is released, so :meth:`Runs.continue_run` can take it over.
        A no-op once finished."""
        if self.finished:
            return
        try:
            if self._new_since_checkpoint() or not self.checkpoints:
                self.put_checkpoint("detach", RunStatus.RUNNING)
        finally:
            self.finished = True
            self._release()

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        if self.finished:
            return
        if exc is None:
            self.close()
            return
        try:
            if exc_type is not None and exc_type.__name__ == "CancelledError":
                self.cancel(f"{exc_type.__name__}: {exc}")
            else:
                self.fail(exc)
        except Exception as flush_error:  # keep the original exception; say the flush failed
            log.error("run %s: the ERROR checkpoint failed: %s", self.run.run_id, flush_error)
            if hasattr(exc, "add_note"):
                exc.add_note(f"qvc: the ERROR checkpoint of run {self.run.run_id} failed: {flush_error!r}")
            self.finished = True
            self._release()
