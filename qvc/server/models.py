"""The request and response shapes of ``qvc serve``: FastAPI validates requests with them and
derives the served OpenAPI document from them.

They mirror the library's JSON forms (:mod:`qvc.readers.views`, ``to_dict()`` of :mod:`qvc.runs`); values
of state, metadata, pending writes and run fields are the lossless tagged JSON of
:mod:`qvc.codec.tagged` (``Any`` here).
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

Boundary = int | Literal["end", "last_user"]


class ErrorDetail(BaseModel):
    type: str = Field(description="The error's kind: a qvc error class, or an HTTP one (not_found, read_only...)")
    message: str
    status: int


class ErrorBody(BaseModel):
    error: ErrorDetail


class Repository(BaseModel):
    path: str
    thread: Optional[str]
    head: Optional[str]
    head_id: Optional[str]
    head_step: Optional[int]
    durability: str
    threads: int
    superseded_lines: int
    pending_writes: int = Field(description="Checkpoints with pending writes, in every layout (qvc status)")
    recovery: Optional[str]
    maintenance_due: Optional[str]
    damaged: Optional[str] = Field(None, description="Why HEAD or the current thread's head does not read "
                                   "(`qvc checkout THREAD` repairs a garbled HEAD); null when they do")
    failures: int = Field(0, description="Checkpoint writes that failed where the caller may not see it")
    last_failures: List[Dict[str, Any]] = Field(default_factory=list, description="The last 5 of them")
    quarantine: List[str] = Field(default_factory=list, description="Folders of files a repair moved aside "
                                  "instead of deleting them (qvc/quarantine/<time>); nothing reads them")
    version: str
    read_only: bool
    live: str = Field(description="How /api/events learns of changes: 'poll' (ref polling) or 'watch'")


class RunRef(BaseModel):
    session_id: str
    run_id: str


class ThreadRow(BaseModel):
    thread: str
    current: bool
    head: Optional[str]
    head_id: Optional[str] = None
    step: Optional[int] = None
    status: Optional[str] = None
    updated: Optional[str] = None
    timestamp: Optional[int] = None
    checkpoints: Optional[int] = None
    run: Optional[RunRef] = None


class ThreadPage(BaseModel):
    total: int = Field(description="Threads matching the filters (all pages)")
    offset: int
    limit: int
    threads: List[ThreadRow]


class SearchMatch(BaseModel):
    path: List[Any] = Field(description="Where in the head's state: the field, then keys and list indexes")
    role: Optional[str] = Field(description="The matching message's role (null: not in a conversation)")
    snippet: str


class SearchHit(BaseModel):
    thread: str
    head: str
    head_id: str
    step: Optional[int]
    status: Optional[str]
    updated: str
    timestamp: int
    run: Optional[RunRef]
    matches: List[SearchMatch] = Field(description="The first messages that say the text (empty without q)")


class SearchPage(BaseModel):
    total: int = Field(description="Threads matching (all pages)")
    offset: int
    limit: int
    threads: List[SearchHit]


class LogEntry(BaseModel):
    id: str
    commit: str
    thread: Optional[str]
    step: Optional[int]
    n: Optional[int] = Field(None, description="A run checkpoint's number, as `qvc log`/`timeline`/`show` print it")
    name: Optional[str] = Field(None, description="A run checkpoint's name, RUN@n as `qvc show` takes it")
    source: str
    time: str
    timestamp: int
    parents: List[str]
    changed: List[str]
    status: Optional[str]
    heads: List[str]
    superseded: bool
    shortid: Optional[str] = Field(None, description="The id as people read it: its shortest unique prefix "
                                   "(12 characters or more) when longer than 16, as `qvc log --oneline` prints it")


class SupersededLine(BaseModel):
    ref: str
    tip: str
    joins: Optional[str] = Field(description="The commit of the current line this line branches from")
    line: List[LogEntry]


class Fork(BaseModel):
    thread: str
    head: str
    at: str = Field(description="The commit of this line the fork starts from")
    first: str = Field(description="The fork's first own commit")
    run: Optional[RunRef]


class ThreadLine(BaseModel):
    thread: str
    head: str
    run: Optional[RunRef]
    line: List[LogEntry]
    truncated: bool
    superseded: List[SupersededLine]
    forks: List[Fork]


class ParentRef(BaseModel):
    thread: Optional[str]
    id: str


class PendingWriteView(BaseModel):
    task: str
    channel: str
    value: Any


class SignatureView(BaseModel):
    status: str = Field(description="verified, unsigned, bad or unknown-key (docs/signing.md)")
    principal: Optional[str] = Field(None, description="Who signed, when verified")
    fingerprint: Optional[str] = Field(None, description="The signing key's SHA256 fingerprint, when signed")
    reason: Optional[str] = Field(None, description="Why it does not verify")


class CheckpointView(BaseModel):
    id: str
    commit: str
    thread: Optional[str]
    step: Optional[int]
    parent: Optional[ParentRef]
    created_at: str
    time: str
    timestamp: int
    signature: Optional[SignatureView] = Field(None, description="Its signature state; null for an unsigned "
                                               "checkpoint of a repository without allowed signers")
    metadata: Dict[str, Any]
    state: Dict[str, Any]
    state_versions: Dict[str, Any]
    pending_writes: List[PendingWriteView]
    notes: List[str] = Field(default_factory=list, description="What its viewer said while showing it, one line "
                             "each (its framework is not installed here: the pip extra that shows it fully)")
    records: List[str] = Field(default_factory=list, description="State fields its viewer calls the writer's "
                               "storage records (a run's `run` and `agno`): people's views show them apart, not in "
                               "the state or its diffs")


class Change(BaseModel):
    model_config = ConfigDict(extra="allow")  # what `qvc diff --json` adds to a change is passed on

    path: List[Any]
    op: str = Field(description="add, remove, change (or another kind `qvc diff --json` names)")
    old: Any = None
    new: Any = None
    member: Optional[bool] = None


class FieldDiff(BaseModel):
    model_config = ConfigDict(extra="allow")

    field: str
    status: Literal["added", "removed", "changed"]
    changes: List[Change]
    summary: Optional[str] = Field(None, description="a conversation field's summary line")
    counts: Optional[Dict[str, int]] = None


class DiffView(BaseModel):
    model_config = ConfigDict(extra="allow")

    a: Optional[str] = Field(description="The old commit (null: B's parent, or nothing for a first checkpoint)")
    b: str
    fields: List[FieldDiff]
    summary: Any = Field(None, description="What changed in one line, when the diff says it (shown first)")


class RunSummary(BaseModel):
    run_id: str
    session_id: str
    status: str
    created_at: float
    updated_at: Optional[float]
    message_count: int
    checkpoint_id: str
    forked_from_run_id: Optional[str]
    regenerated_from: Optional[str]
    owner: Optional[Dict[str, Any]]


class RunPage(BaseModel):
    total: int
    offset: int
    limit: int
    runs: List[RunSummary]


class OwnerStatus(BaseModel):
    state: Literal["none", "live", "stale"]
    owner: Optional[Dict[str, Any]]
    reason: str


class RunView(BaseModel):
    thread: str
    owner_status: OwnerStatus
    run: Dict[str, Any] = Field(description="Run.to_dict() of the latest checkpoint, without the owner lease "
                                            "and takeovers")


class TimelineEntry(BaseModel):
    id: str = Field(description="The checkpoint id: stable, accepted by /checkpoints/{at}")
    n: int = Field(description="The checkpoint's number, its message index, as `qvc log`/`timeline`/`show` print it")
    name: str = Field(description="RUN@n (RUN@<checkpoint id> where RUN@n names another checkpoint)")
    run_id: str
    message_index: int
    continue_from: int
    status: str
    reason: str
    created_at: float
    time: Optional[str]
    role: Optional[str]
    preview: str
    is_latest: bool
    current: bool = Field(description="False for checkpoints of a line a rewind left behind")
    parent_id: Optional[str]


class Timeline(BaseModel):
    run_id: str
    session_id: str
    thread: str
    checkpoints: List[TimelineEntry]


class SnapshotView(BaseModel):
    checkpoint_id: str
    requested_index: int
    message_index: int
    snapped: bool
    exact: bool
    current: bool
    run: Dict[str, Any]


class ContinueRequest(BaseModel):
    input: Any = Field(None, description="Appended as a user message (tagged JSON)")
    continue_from: Boundary = Field("end", description="'end', 'last_user' or a message index (negative: from the end)")
    fork: bool = Field(False, description="Always continue in a new run")
    requirements: Optional[List[Dict[str, Any]]] = Field(None, description="A PAUSED run's resolved requirements")


class ForkRunRequest(BaseModel):
    at: Boundary = "end"
    input: Any = None
    new_run_id: Optional[str] = None


class RunAction(BaseModel):
    run_id: str
    session_id: str
    thread: str
    head: str = Field(description="The run thread's new head commit")
    checkpoint_id: str
    status: str
    message_index: int
    forked: bool = Field(description="The continuation is a new run (forked_from_run_id names the source)")
    forked_from_run_id: Optional[str]
    forked_from_message_index: Optional[int]
    agent: bool = Field(description="The server's agent records the continuation now (else it is detached, "
                                    "or a PENDING fork, for an agent to continue)")


class ForkThreadRequest(BaseModel):
    checkpoint: str = Field(description="Where to fork: a checkpoint id, commit, THREAD, THREAD~N...")
    thread: str = Field(description="The new thread")


class ResetRequest(BaseModel):
    thread: str
    to: str = Field(description="A checkpoint of the thread (id, commit, THREAD~N...)")


class ThreadAction(BaseModel):
    thread: str
    head: Optional[str] = Field(description="The thread's new head commit (null: the thread is gone)")
    id: Optional[str] = Field(description="The new head's checkpoint id")
    step: Optional[int]
    deleted: Optional[str] = Field(None, description="What was deleted: a checkpoint id, or the thread's old head")
