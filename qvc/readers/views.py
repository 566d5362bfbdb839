"""Checkpoints, diffs and threads as JSON: the forms ``qvc show/diff/branch --json`` print and
``qvc serve`` answers with (one definition for both).

Values of state, metadata and pending writes are in the lossless tagged JSON of
:mod:`qvc.codec.tagged`. A checkpoint's state is shown through its viewer
(:mod:`qvc.store.viewers`: LangGraph's channels as plain data, runs as conversations, the
shared conversation shape of ``docs/adapters.md``) unless ``raw`` asks for the stored fields.
Everything here reads only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

from qvc.codec.tagged import to_jsonable
from qvc.errors import CorruptionError, NotFoundError, QvcError, UnknownThreadError
from qvc.readers.log import ViewedNames, entry, log, short_id
from qvc.store.refnames import superseded_prefix
from qvc.store.viewers import bookkeeping_of, collecting_notes, records_of, view_state, view_writes

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore
    from qvc.types import PendingWrite


def iso(ts: int | float) -> str:
    """A Unix time as ISO 8601 UTC."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


def state_of(store: GitCheckpointStore, sha: str, state: dict, *, plain: bool = False, raw: bool = False) -> dict:
    """The state to show people: as the viewer registered for the checkpoint's writer shows it
    (:func:`qvc.store.viewers.view_state`; an adapter's values decoded by its framework when that
    is installed, a run as its conversation), else ``state`` as stored; ``raw``: ``state`` as
    stored, always."""
    return state if raw else view_state(store, sha, state, plain=plain)


def shown_writes(store: GitCheckpointStore, sha: str, stored: dict, shown: dict, *, plain: bool = False,
                 raw: bool = False) -> list[PendingWrite]:
    """The pending writes of checkpoint commit ``sha`` to show beside its viewed state, whatever
    layout holds them (:meth:`~qvc.store.git_store.GitCheckpointStore.checkpoint_pending_writes`):
    as its viewer shows them (:func:`qvc.store.viewers.view_writes`: LangGraph's values decoded,
    its internal channels left out; ``plain``: as plain data), and without those to fields the
    viewer hides (``stored`` fields not ``shown``: a run's owner heartbeats), which are
    bookkeeping; ``raw``: every write as stored. Raises :class:`~qvc.errors.CorruptionError`."""
    writes = store.checkpoint_pending_writes(sha)
    if raw:
        return writes
    hidden = set(stored) - set(shown)
    return [w for w in view_writes(store, sha, writes, plain=plain) if w.channel not in hidden]


def shown_metadata(store: GitCheckpointStore, sha: str, metadata: dict, *, raw: bool = False) -> dict:
    """A checkpoint's metadata to show: without the keys its viewer calls bookkeeping
    (:func:`qvc.store.viewers.bookkeeping_of`: a run's ``takeover`` record, the owners' lease tokens
    in it), unless ``raw``."""
    hidden = frozenset() if raw else bookkeeping_of(store, sha)
    return {k: v for k, v in metadata.items() if k not in hidden} if hidden else metadata


def for_people(store: GitCheckpointStore, sha: str, state: dict, fields: Sequence[str] = (), *,
               raw: bool = False) -> dict:
    """A viewed ``state`` of checkpoint commit ``sha`` as people's views show it (the text forms, the
    page): without the fields its viewer calls the writer's storage records
    (:func:`qvc.store.viewers.records_of`: a run's ``run`` and ``agno``) unless named in ``fields``
    or ``raw``."""
    hidden = frozenset() if raw else records_of(store, sha) - set(fields)
    return {k: v for k, v in state.items() if k not in hidden} if hidden else state


def people_diffs(store: GitCheckpointStore, diffs: list, shas: Sequence[Optional[str]], fields: Sequence[str] = (), *,
                 raw: bool = False) -> list:
    """``diffs`` between the checkpoint commits ``shas`` as people's views show them: without the
    fields either side's viewer calls storage records (see :func:`for_people`) unless named in
    ``fields`` or ``raw``."""
    if raw:
        return diffs
    hidden: set[str] = set()
    for sha in shas:
        if sha:
            hidden |= records_of(store, sha)
    hidden -= set(fields)
    return [d for d in diffs if d.field not in hidden] if hidden else diffs


def checkpoint_json(store: GitCheckpointStore, sha: str, fields: Sequence[str] = (), *,
                    raw: bool = False) -> dict[str, Any]:
    """The ``qvc show --json`` form of checkpoint commit ``sha`` (only ``fields`` of the state, if
    given), its state as its viewer shows it (the stored fields with ``raw``); ``"signature"``: its
    signature state (:func:`qvc.readers.signatures.signature_reader`; ``None`` when there is nothing to
    say); ``"notes"`` (present
    only then): the lines its viewer noted while showing it (its framework not installed: which
    extra shows the values fully).

    Raises :class:`~qvc.errors.NotFoundError` for a field the state does not have. A damaged
    field (its blob missing or not decoding) is left out of ``state`` and named, with why, in
    ``"damaged"`` (present only then); asking for it in ``fields`` raises
    :class:`~qvc.errors.CorruptionError`, asking for healthy fields works.
    """
    from qvc.readers.signatures import signature_reader  # deferred: start-up time (every CLI command loads this module)

    damaged: dict[str, str] = {}
    tup = store.read(sha, damaged=damaged)
    info = store.commit_info(sha)
    cp = tup.checkpoint
    with collecting_notes() as said:
        state = state_of(store, sha, cp.state_data, plain=True, raw=raw) if not damaged else cp.state_data
        writes = shown_writes(store, sha, cp.state_data, state, plain=True, raw=raw)
    for f in fields:
        if f in damaged:
            raise CorruptionError(damaged[f])
        if f not in state:
            short = cp.id if len(cp.id) <= 16 else cp.id[:12]
            raise NotFoundError(f"checkpoint {short} has no field {f!r} (fields: {', '.join(state) or 'none'})")
    shown = {f: state[f] for f in fields} if fields else state
    parent = tup.parent_config
    out = {
        "id": cp.id, "commit": sha, "thread": cp.thread_id, "step": cp.step,
        "parent": {"thread": parent.thread_id, "id": parent.checkpoint_id} if parent else None,
        "created_at": cp.created_at, "time": iso(info.time), "timestamp": info.time,
        "signature": signature_reader(store)(sha),
        "metadata": to_jsonable(shown_metadata(store, sha, tup.metadata, raw=raw), "metadata"),
        "state": to_jsonable(shown, "state"),
        "state_versions": cp.state_versions if raw or damaged else
        {f: v for f, v in cp.state_versions.items() if f in state},
        "pending_writes": [{"task": w.task_id, "channel": w.channel, "value": to_jsonable(w.value, "write")}
                           for w in writes],
    }
    records = sorted(records_of(store, sha) & set(shown)) if not raw else []
    if records:  # what people's views (the page) show apart from the state and its diffs
        out["records"] = records
    if damaged:
        out["damaged"] = damaged
    if said:
        out["notes"] = said
    return out


def diff_commits(store: GitCheckpointStore, a: Optional[str], b: str,
                 damaged: dict[str, str] | None = None, *, plain: bool = False, raw: bool = False) -> list:
    """The field diffs (:func:`qvc.readers.statediff.diff_states`) from commit ``a`` to ``b``; ``a=None``
    compares ``b`` with its parent (everything added for a first checkpoint).

    With ``damaged`` (a dict), a field damaged on either side is not compared: it is named in
    ``damaged`` with why, and the healthy fields are compared; without it, it raises
    :class:`~qvc.errors.CorruptionError`. Each side is shown through its viewer (see
    :func:`state_of`; ``plain``: as plain data, for the JSON forms), or as stored with ``raw``."""
    from qvc.readers.statediff import diff_states  # deferred: start-up time (every CLI command loads this module)

    bad: dict[str, str] = {}

    def state(sha: str | None) -> dict:
        if not sha:
            return {}
        here: dict[str, str] = {}
        data = store.read(sha, damaged=here if damaged is not None else None).checkpoint.state_data
        bad.update(here)
        return state_of(store, sha, data, plain=plain, raw=raw) if not here else data

    old, new = (state(store.commit_info(b).parent) if a is None else state(a)), state(b)
    if bad and damaged is not None:
        damaged.update(bad)
        old = {k: v for k, v in old.items() if k not in bad}
        new = {k: v for k, v in new.items() if k not in bad}
    return diff_states(old, new)


def thread_json(store: GitCheckpointStore, thread: str, current: bool = False, *, verbose: bool = True,
                count: bool = True, tip: str | None = None) -> dict[str, Any]:
    """One row of ``qvc branch -v --json``: head, head id, step, status, last update, checkpoint count.

    ``count=False`` leaves out the count (``None``), which walks the thread's whole line.
    ``tip``: the thread's head when the caller read it already (``store.thread_heads()``).
    """
    tip = tip or store.head(thread)
    row: dict[str, Any] = {"thread": thread, "current": current, "head": tip}
    if verbose and tip is not None:
        e = entry(store, tip)
        row.update(head_id=e.checkpoint_id, step=e.step, status=e.status, updated=iso(e.time), timestamp=e.time,
                   checkpoints=sum(1 for _ in store.first_parents(tip)) if count else None)
    return row


def kept_lines(store: GitCheckpointStore, thread: str) -> list[str]:
    """The tips of the lines time travel kept for ``thread`` that its current line does not reach:
    what deleting the thread deletes too (``qvc branch -d`` refuses then). Empty when there are none."""
    tip = store.head(thread)
    line = {info.hex for info in store.first_parents(tip)} if tip is not None else set()
    return [stip for _, stip in store.repository.refs(superseded_prefix(thread)) if stip not in line]


def is_kept_line(store: GitCheckpointStore, thread: str, tip: str) -> bool:
    """Whether time travel keeps the line ending at commit ``tip`` as a superseded line of ``thread``
    (:meth:`~qvc.store.git_store.GitCheckpointStore.reset` keeps the head it leaves when the new head
    does not descend from it)."""
    return store.repository.ref(superseded_prefix(thread) + tip) is not None


def run_of_thread(thread: str) -> Optional[dict[str, str]]:
    """``{"session_id", "run_id"}`` when ``thread`` is a run's thread (``run/<session>/<run>``), else ``None``."""
    from qvc.runs import THREAD_PREFIX  # deferred: start-up time (every CLI command loads this module)

    rest = thread[len(THREAD_PREFIX):] if thread.startswith(THREAD_PREFIX) else ""
    if "/" not in rest:
        return None
    session_id, run_id = rest.rsplit("/", 1)
    return {"session_id": session_id, "run_id": run_id}


def run_number(store: GitCheckpointStore, thread: str | None, checkpoint_id: str,
               cache: dict | None = None) -> tuple | None:
    """``(n, name)`` of checkpoint ``checkpoint_id`` of the run on ``thread``
    (:func:`qvc.runs.queries.numbers`), or ``None`` when ``thread`` is no run's. ``cache`` (a dict
    the caller keeps) holds each run's numbering, read once per run."""
    from qvc.runs.ids import THREAD_PREFIX  # deferred: start-up time (every CLI command loads this module)

    if thread is None or not thread.startswith(THREAD_PREFIX) or "/" not in thread[len(THREAD_PREFIX):]:
        return None
    if cache is None or thread not in cache:
        from qvc.runs.queries import numbers  # deferred: start-up time

        try:
            found = numbers(store, thread)
        except QvcError:  # a run that does not read (damaged, not a run after all): no numbers, the log goes on
            found = {}
        if cache is None:
            return found.get(checkpoint_id)
        cache[thread] = found
    return cache[thread].get(checkpoint_id)


def number_entries(store: GitCheckpointStore, entries: Iterable, cache: dict | None = None) -> Iterator:
    """The log entries as they come, those of run checkpoints given their ``n`` and ``name`` (``RUN@n``):
    ``qvc log`` (its text and ``--json``) and ``qvc serve``'s thread lines (:func:`thread_line_json`).
    ``cache``: a dict kept across calls (each run's numbering is read once)."""
    cache = {} if cache is None else cache
    for e in entries:
        found = run_number(store, e.thread, e.checkpoint_id, cache)
        if found is not None:
            e.n, e.name = found
        yield e


def thread_line_json(store: GitCheckpointStore, thread: str, limit: int = 500) -> dict[str, Any]:
    """A thread's history for a graph: its line (``qvc log --json`` entries: the fields each changed as
    its viewer shows them, a run's checkpoints numbered ``RUN@n``; each with its ``shortid``
    (:func:`~qvc.readers.log.short_id`), newest first, crossing into
    the source thread at a fork; at most ``limit``), the lines time travel left behind (each
    with the commit where it joins the line), and the threads forked from the line.

    Finding forks reads the own checkpoints of every thread once. Raises
    :class:`~qvc.errors.UnknownThreadError`.
    """
    tip = store.head(thread)
    if tip is None:
        raise UnknownThreadError(f"thread {thread!r} not found")
    numbers: dict = {}  # each run's numbering, read once
    viewed = ViewedNames(store)

    def as_json(entries: Iterable) -> list[dict[str, Any]]:  # as `qvc log --json` gives them
        return [{**e.to_json(), "shortid": short_id(e.checkpoint_id, store)}
                for e in number_entries(store, entries, numbers)]

    entries = as_json(log(store, tip, limit=limit + 1, viewed=True))
    on_line = {info.hex for info in store.first_parents(tip)}
    superseded = []
    for ref, stip in store.repository.refs(superseded_prefix(thread)):
        line, joins = [], None
        for info in store.first_parents(stip):
            if info.hex in on_line:
                joins = info.hex
                break
            line.append(entry(store, info.hex, superseded=True, viewed=viewed))
        superseded.append({"ref": ref, "tip": stip, "joins": joins, "line": as_json(line)})
    forks = []
    for other in store.threads():
        otip = store.head(other)
        if other == thread or otip is None:
            continue
        first = None
        for info in store.first_parents(otip):
            if info.thread_id != other:
                if info.hex in on_line and first is not None:
                    forks.append({"thread": other, "head": otip, "at": info.hex, "first": first,
                                  "run": run_of_thread(other)})
                break
            first = info.hex
    return {"thread": thread, "head": tip, "run": run_of_thread(thread), "line": entries[:limit],
            "truncated": len(entries) > limit, "superseded": superseded, "forks": forks}
