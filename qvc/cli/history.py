"""Reading history: ``qvc log`` (``--follow`` is :mod:`qvc.cli.following`) and ``qvc show``."""

from __future__ import annotations

from datetime import datetime

import click

from qvc.cli.app import cli, complete_names, revision, session
from qvc.cli.following import follow_log
from qvc.cli.output import ago, emit_json, page, short, style, value_width
from qvc.cli.runs import show_run
from qvc.errors import CorruptionError, NotFoundError
from qvc.inspect.views import iso


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N checkpoints.")
@click.option("--oneline", is_flag=True, help="One line per checkpoint.")
@click.option("--graph", is_flag=True, help="Draw forks across threads (git's graph).")
@click.option("--all", "all_", is_flag=True, help="Every thread and the lines superseded by time travel.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of checkpoints.")
@click.option("-f", "--follow", is_flag=True, help="Then print new checkpoints of the thread as they come.")
def log(name: str | None, limit: int | None, oneline: bool, graph: bool, all_: bool, as_json: bool,
        follow: bool) -> None:
    """Show checkpoints, newest first (default: the current thread).

    NAME is a thread or a checkpoint; its line is followed back through forks. With --follow
    NAME is a thread (it may not exist yet): new checkpoints are printed as other processes
    write them until interrupted (--json: one object per line).

    \b
    Example:
      qvc log --oneline -n 20 run-7
      qvc log --all --graph
      qvc log --follow --oneline run-7
    """
    # deferred: start-up speed
    from qvc.inspect.log import graph as draw
    from qvc.inspect.log import log as walk

    if graph and as_json:
        raise click.UsageError("--graph and --json do not go together")
    store = session().store()
    if follow:
        if graph or all_:
            raise click.UsageError("--follow takes one thread, not --graph or --all")
        return follow_log(store, name, limit, as_json, lambda e, head: entry_lines(e, head, oneline))
    head = store.current()
    start = None if all_ and name is None else revision(store, name).commit
    if graph:
        text = draw(store, start, limit=limit, all=all_, color=session().color)
        page(text.rstrip("\n").split("\n") if text else [])
        return
    entries = walk(store, start, limit=limit, all=all_)
    if as_json:
        emit_json([e.to_json() for e in entries])
        return
    lines = [line for e in entries for line in entry_lines(e, head, oneline)]
    page(lines[:-1] if lines and lines[-1] == "" else lines)


def decorations(entry, head) -> str:
    """`` (HEAD -> t, other, superseded)``: the names pointing at a log entry, as git decorates."""
    names = [f"HEAD -> {t}" if t == head.thread else t for t in entry.heads]
    if head.thread is None and head.commit == entry.commit:
        names.insert(0, "HEAD")
    if entry.superseded:
        names.append("superseded")
    return f" ({', '.join(names)})" if names else ""


def entry_lines(e, head, oneline: bool) -> list[str]:
    """One log entry as text: one line with --oneline, else a block ending in a blank line."""
    status = f" [{e.status}]" if e.status else ""
    if oneline:
        return [f"{style(e.commit[:7], fg='yellow')} {short(e.checkpoint_id)} step {e.step} · "
                f"{e.source or 'put'} · {len(e.changed)} changed{status}{style(decorations(e, head), fg='cyan')}"]
    return [style(f"checkpoint {e.checkpoint_id}", fg="yellow") + style(decorations(e, head), fg="cyan"),
            f"Commit:  {e.commit[:12]}   Thread: {e.thread}   Step: {e.step}   "
            f"Source: {e.source or 'put'}{'   Status: ' + e.status if e.status else ''}",
            f"Date:    {ago(e.time)} ({datetime.fromtimestamp(e.time).astimezone():%Y-%m-%d %H:%M:%S %z})",
            f"Changed: {', '.join(e.changed) if e.changed else '(nothing)'}", ""]


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("--field", "fields", multiple=True, metavar="NAME", help="Show only this state field (repeatable).")
@click.option("--full", is_flag=True, help="Do not shorten long strings and lists.")
@click.option("--json", "as_json", is_flag=True, help="The exact data (lossless tagged JSON).")
def show(name: str | None, fields: tuple[str, ...], full: bool, as_json: bool) -> None:
    """Show a checkpoint: header, metadata, state and pending writes (default: HEAD).

    \b
    Example:
      qvc show run-7~2 --field messages --full
      qvc show 3f2a9c --json
    """
    # deferred: start-up speed
    from qvc.inspect.statediff import shorten
    from qvc.inspect.views import checkpoint_json, state_of

    store = session().store()
    try:
        rev = revision(store, name)
    except NotFoundError:
        if name is None or not show_run(store, name, full, as_json):
            raise
        return
    if as_json:
        emit_json(checkpoint_json(store, rev.commit, fields))
        return
    damaged: dict[str, str] = {}  # fields whose blob does not read: marked, the others shown
    tup = store.read(rev.commit, damaged=damaged)
    info = store.commit(rev.commit)
    cp = tup.checkpoint
    state = state_of(store, rev.commit, cp.state_data) if not damaged else cp.state_data
    for f in fields:
        if f in damaged:
            raise CorruptionError(damaged[f])
        if f not in state:
            raise NotFoundError(f"checkpoint {short(cp.id)} has no field {f!r} (fields: {', '.join(state) or 'none'})")
    shown = {f: state[f] for f in fields} if fields else state
    parent = tup.parent_config
    width = value_width()
    lines = [style(f"checkpoint {cp.id}", fg="yellow"),
             f"Commit:   {rev.commit}",
             f"Thread:   {cp.thread_id}   Step: {cp.step}",
             f"Parent:   {parent.thread_id}@{parent.checkpoint_id}" if parent else "Parent:   (none)",
             f"Date:     {ago(info.time)} ({cp.created_at or iso(info.time)})"]
    if tup.metadata:
        lines.append(style("Metadata:", bold=True))
        lines += [f"  {k}: {shorten(v, full, width)}" for k, v in tup.metadata.items()]
    lines.append(style(f"State ({len(state) + len(damaged)} field{'s' if len(state) + len(damaged) != 1 else ''}):",
                       bold=True))
    lines += [f"  {style(f, fg='red')}: DAMAGED ({why}; see `qvc fsck`)" for f, why in damaged.items() if not fields]
    for f, v in shown.items():
        version = cp.state_versions.get(f)
        lines.append(f"  {style(f, fg='green')}{f' (v{version})' if version else ''}: {shorten(v, full, width)}")
    writes = tup.pending_writes or []
    lines.append(style(f"Pending writes ({len(writes)}):", bold=True) if writes else "Pending writes: none")
    lines += [f"  {w.task_id} {w.channel}: {shorten(w.value, full, width)}" for w in writes]
    page(lines)
