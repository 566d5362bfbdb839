"""Agent runs (:mod:`qvc.runs`): ``qvc runs``, ``qvc timeline``, and ``qvc show RUN`` (through
:func:`show_run`, which ``qvc show`` calls for a name that is no checkpoint).

A run's checkpoints have one numbering everywhere (:func:`qvc.runs.queries.numbers`): ``RUN@n``,
``n`` the messages the run holds there, the name ``qvc show RUN@n`` resolves; ``qvc log``,
``qvc show`` and ``qvc serve`` get it through :func:`qvc.readers.views.run_number`."""

from __future__ import annotations

import click

from qvc.cli.app import cli, session
from qvc.cli.output import emit_json, out, page, short, style, value_width
from qvc.errors import InvalidInputError, NotFoundError, UnknownRunError
from qvc.readers.dates import ago
from qvc.readers.views import run_number


def show_run(store, ref: str, full: bool, as_json: bool, fields: tuple[str, ...] = ()) -> bool:
    """``qvc show RUN`` / ``RUN@MESSAGE_INDEX`` / ``RUN@CHECKPOINT_ID`` / ``RUN@{N}``: ``False`` if no
    run has that id. ``fields``: only those of the run as shown (:func:`qvc.runs.viewer.run_fields`:
    ``messages``, ``status``, ...); one it does not have is :class:`~qvc.errors.NotFoundError`. The
    owner lease and takeovers are bookkeeping, left out (``--raw`` shows the stored checkpoint)."""
    from qvc.runs import Runs, Snapshot, parse_run_ref  # deferred: start-up speed
    from qvc.runs.viewer import run_fields, shown_run

    try:
        run_id, _ = parse_run_ref(ref)
        runs = Runs(store)
        shown = runs.show(ref)
    except (UnknownRunError, InvalidInputError):
        return False
    run = shown.run if isinstance(shown, Snapshot) else shown
    n, name = run_number(store, runs.thread(run_id), shown.checkpoint_id or "") or (None, None)
    basis = (n, name)
    if isinstance(shown, Snapshot) and not shown.exact:  # between checkpoints: the run at that message
        n, name = shown.message_index, f"{run.run_id}@{shown.message_index}"
    values = run_fields(run)
    for f in fields:
        if f not in values:
            raise NotFoundError(f"run {shown_name(name, n) if name else run.run_id} has no field {f!r} "
                                f"(fields: {', '.join(values)})")
    if as_json:
        from qvc.codec.tagged import to_jsonable  # deferred: start-up speed

        data = to_jsonable(shown_run(shown.to_dict()), "run")
        if fields:  # the fields asked for, as shown (`qvc show CHECKPOINT --json`'s "state"), for the run
            data = {k: v for k, v in data.items() if k != "run"} if isinstance(shown, Snapshot) \
                else {"checkpoint_id": run.checkpoint_id}
            data["state"] = to_jsonable({f: values[f] for f in fields}, "state")
        emit_json({"n": n, "name": name, **data})
        return True
    from qvc.readers.statediff import is_conversation, message_line, shorten  # deferred: start-up speed

    label = f"{shown_name(name, n)} · " if name else ""
    width = value_width()
    lines = [style(f"run {run.run_id}", fg="yellow") + f" (session {run.session_id})  status {run.status.value}"]
    if isinstance(shown, Snapshot):
        snapped = "" if shown.requested_index == shown.message_index else \
            f" (asked for {shown.requested_index}; moved to the nearest pair-safe boundary)"
        if shown.exact:
            lines.append(f"{label}checkpoint {shown.checkpoint_id} · as of message {shown.message_index}{snapped}"
                         + ("" if shown.current else " (superseded)"))
        else:  # no checkpoint at that message: say which one the rest of the run is read from
            where = "the last checkpoint before it" if basis[0] is not None and basis[0] < shown.message_index \
                else "before the run's first checkpoint"
            named = f"{shown_name(basis[1], basis[0])} " if basis[1] else ""
            lines.append(f"{label}as of message {shown.message_index}{snapped} · between checkpoints: {where}, "
                         f"{named}(checkpoint {short(shown.checkpoint_id)})")
    else:
        lines.append(f"latest: {label}checkpoint {run.checkpoint_id}")
    if fields:  # as `qvc show CHECKPOINT --field` prints a field
        for f in fields:
            v = values[f]
            if is_conversation(v):
                lines.append(f"{style(f, fg='green')}: {len(v)} message{'' if len(v) == 1 else 's'}")
                lines += [f"  {i:>3} {message_line(m, full=full, width=max(40, width - 6))}" for i, m in enumerate(v)]
            else:
                lines.append(f"{style(f, fg='green')}: {shorten(v, full, width, key=f)}")
        page(lines)
        return True
    lines.append(style(f"Messages ({len(run.messages)}):", bold=True))
    for i, m in enumerate(values["messages"]):  # as `qvc diff` and `qvc show CHECKPOINT` print them
        lines.append(f"  {i:>3} {message_line(m, full=full, width=max(40, width - 6))}")
    if run.session_state:
        lines.append(f"Session state: {shorten(run.session_state, full, width)}")
    if run.metrics:
        lines.append(f"Metrics: {shorten(run.metrics, full, width)}")
    if run.error:
        lines.append(style(f"Error: {shorten(run.error, full, width)}", fg="red"))
    if run.content is not None:
        lines.append(f"Content: {shorten(run.content, full, width)}")
    page(lines)
    return True


@cli.command()
@click.option("--session", "session_id", metavar="ID", help="Only the runs of this session.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def runs(session_id: str | None, as_json: bool) -> None:
    """List agent runs (see qvc.runs): status, messages, last update, lineage.

    \b
    Example:
      qvc runs --session s-42
    """
    from qvc.runs import Runs  # deferred: start-up speed

    found = Runs(session().store()).list_runs(session_id)
    if as_json:
        emit_json([r.to_dict() for r in found])
        return
    if not found:
        out(f"no runs{f' in session {session_id}' if session_id else ''} (qvc.runs records them; see docs/runs.md)")
        return
    lines = []
    width = max(len(r.run_id) for r in found)  # one column for each, whatever the ids' lengths
    for r in found:
        lineage = (f" · forked from {r.forked_from_run_id}" if r.forked_from_run_id else "") + (
            f" · regenerates {r.regenerated_from}" if r.regenerated_from else "")
        pad = " " * (width - len(r.run_id))  # padded outside the colour codes, so columns line up in colour too
        lines.append(f"{style(r.run_id, fg='yellow')}{pad}  {r.status.value:<11} session {r.session_id} · "
                     f"{r.message_count} message(s) · updated {ago(r.updated_at or r.created_at)}{lineage}")
    page(lines)


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def timeline(run_id: str, as_json: bool) -> None:
    """A run's checkpoints with their message boundaries: where it can be continued from.

    The id column is the checkpoint id (stable); the name column is what `qvc show`, `qvc log`
    and `qvc diff` take for it: RUN@N, N the messages the run holds there (RUN@ID for a second
    checkpoint at the same N, or one time travel left).

    \b
    Example:
      qvc timeline r-7 && qvc show r-7@12
    """
    from qvc.runs import Runs  # deferred: start-up speed

    entries = Runs(session().store()).timeline(run_id)
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    names = [shown_name(e.name, e.message_index) for e in entries]
    width = max(map(len, names), default=0)
    lines = []
    for e, name in zip(entries, names, strict=True):
        if e.cut:
            lines.append(f"  (retention: {e.cut}; the run reads from here)")
        mark = "*" if e.is_latest else (" " if e.current else "~")
        lines.append(f"{mark} {style(short(e.id), fg='yellow')}  {name:<{width}}  {e.status.value:<11} "
                     f"{e.reason:<12} {(e.role or '-'):<9} {e.preview}  ({ago(e.created_at)})")
    lines.append("(* latest, ~ superseded by time travel; RUN@N: the run at N messages, as `qvc show RUN@N`)")
    page(lines)


def shown_name(name: str, n: int) -> str:
    """A run checkpoint's name as text shows it: ``RUN@n``, or ``RUN@<checkpoint id>`` with the id
    abbreviated (a unique prefix, which every command takes)."""
    run, _, at = name.rpartition("@")
    return name if at == str(n) else f"{run}@{short(at)}"


def run_named(store, text: str) -> bool:
    """Whether ``text`` names a checkpoint only as a run's (``RUN``, ``RUN@N``, ``RUN@N~1``): no
    thread, tag, checkpoint id or commit of the store's own is called that."""
    from qvc.errors import NotFoundError
    from qvc.store.revisions import parse_revision  # deferred: start-up speed

    try:
        parse_revision(store, text)
    except NotFoundError:
        return True
    return False


def fork_run(store, commit: str, new: str):
    """``qvc branch NEW RUN@N``: when checkpoint commit ``commit`` is a boundary on a run's current
    line, the run ``new`` forked from it (:meth:`qvc.runs.Runs.fork` at that boundary's message
    index: PENDING, its own thread ``run/<session>/NEW``, recording where it came from), so
    ``qvc timeline NEW`` and ``qvc show NEW`` read it as a run; else ``None`` (a plain fork)."""
    from qvc.readers.views import run_of_thread  # deferred: start-up speed
    from qvc.runs import Runs

    info = store.commit_info(commit)
    source = run_of_thread(info.thread_id or "")
    metadata = store.header(commit)[1]
    index = metadata.get("message_index") if isinstance(metadata, dict) else None
    if source is None or metadata.get("source") != "run" or type(index) is not int:
        return None
    head = store.head(info.thread_id)
    if head is None or all(c.hex != commit for c in store.first_parents(head)):  # a superseded line's
        return None
    return Runs(store).fork(source["run_id"], index, new_run_id=new)
