"""Agent runs (:mod:`qvc.runs`): ``qvc runs``, ``qvc timeline``, and ``qvc show RUN`` (through
:func:`show_run`, which ``qvc show`` calls for a name that is no checkpoint)."""

from __future__ import annotations

import click

from qvc.cli.app import cli, session
from qvc.cli.output import emit_json, page, short, style, value_width
from qvc.errors import InvalidInputError, UnknownRunError
from qvc.readers.dates import ago


def show_run(store, ref: str, full: bool, as_json: bool) -> bool:
    """``qvc show RUN`` / ``RUN@MESSAGE_INDEX`` / ``RUN@CHECKPOINT``: ``False`` if no run has that id."""
    from qvc.runs import Runs, Snapshot, parse_run_ref  # deferred: start-up speed

    try:
        parse_run_ref(ref)
        shown = Runs(store).show(ref)
    except (UnknownRunError, InvalidInputError):
        return False
    if as_json:
        emit_json(shown.to_dict())
        return True
    from qvc.readers.statediff import shorten  # deferred: start-up speed

    run = shown.run if isinstance(shown, Snapshot) else shown
    width = value_width()
    lines = [style(f"run {run.run_id}", fg="yellow") + f" (session {run.session_id})  status {run.status.value}"]
    if isinstance(shown, Snapshot):
        snapped = "" if shown.requested_index == shown.message_index else \
            f" (asked for {shown.requested_index}; moved to the nearest pair-safe boundary)"
        lines.append(f"as of message {shown.message_index}{snapped}, checkpoint {shown.checkpoint_id}"
                     + ("" if shown.current else " (superseded)"))
    else:
        lines.append(f"latest checkpoint {run.checkpoint_id}")
    lines.append(style(f"Messages ({len(run.messages)}):", bold=True))
    for i, m in enumerate(run.messages):
        calls = f" calls {', '.join(c.name for c in m.tool_calls)}" if m.tool_calls else ""
        answer = f" [{m.tool_name or m.tool_call_id}]" if m.role == "tool" else ""
        lines.append(f"  {i:>3} {m.role}{answer}{calls}: {shorten(m.content, full, width)}")
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
    lines = []
    for r in found:
        lineage = (f" · forked from {r.forked_from_run_id}" if r.forked_from_run_id else "") + (
            f" · regenerates {r.regenerated_from}" if r.regenerated_from else "")
        lines.append(f"{style(r.run_id, fg='yellow')}  {r.status.value:<11} session {r.session_id} · "
                     f"{r.message_count} message(s) · updated {ago(r.updated_at or r.created_at)}{lineage}")
    page(lines)


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def timeline(run_id: str, as_json: bool) -> None:
    """A run's checkpoints with their message boundaries: where it can be continued from.

    The id column is the checkpoint id (stable); `qvc show RUN@INDEX` shows the run as it was
    at that boundary.

    \b
    Example:
      qvc timeline r-7 && qvc show r-7@12
    """
    from qvc.runs import Runs  # deferred: start-up speed

    entries = Runs(session().store()).timeline(run_id)
    if as_json:
        emit_json([e.to_dict() for e in entries])
        return
    lines = []
    for e in entries:
        mark = "*" if e.is_latest else (" " if e.current else "~")
        lines.append(f"{mark} {style(short(e.id), fg='yellow')}  msg {e.message_index:>3}  {e.status.value:<11} "
                     f"{e.reason:<12} {(e.role or '-'):<9} {e.preview}  ({ago(e.created_at)})")
    lines.append("(* latest, ~ superseded by time travel)")
    page(lines)
