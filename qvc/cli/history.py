"""Reading history: ``qvc log`` (``--follow`` is :mod:`qvc.cli.following`) and ``qvc show``."""

from __future__ import annotations

from datetime import datetime

import click

from qvc.cli.app import cli, complete_names, revision, run_names, session
from qvc.cli.following import follow_log
from qvc.cli.output import emit_json, page, short, style, value_width
from qvc.cli.runs import number_entries, run_number, show_run, shown_name
from qvc.errors import CorruptionError, InvalidInputError, NotFoundError
from qvc.readers.dates import ago
from qvc.readers.views import iso


class PathsAfterDashes(click.Command):
    """A command whose arguments after ``--`` are kept apart, as git keeps paths apart from
    revisions (``qvc log run-7 -- messages``): they are in ``ctx.meta["after_dashes"]``."""

    after_dashes_metavar = "FIELD..."

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), f"[-- {self.after_dashes_metavar}]"]

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["after_dashes"] = args[args.index("--") + 1:] if "--" in args else []
        return super().parse_args(ctx, args[:args.index("--")] if "--" in args else args)


@cli.command(cls=PathsAfterDashes)
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N checkpoints.")
@click.option("--oneline", is_flag=True, help="One line per checkpoint.")
@click.option("--graph", is_flag=True, help="Draw forks across threads (git's graph).")
@click.option("--all", "all_", is_flag=True, help="Every thread and the lines superseded by time travel.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of checkpoints.")
@click.option("-f", "--follow", is_flag=True, help="Oldest first, then new checkpoints, resets, forks, deletions.")
@click.option("--reverse", is_flag=True, help="Oldest first (after -n has chosen the newest N).")
@click.option("--since", "--after", "since", metavar="DATE", help="Only checkpoints at or after DATE (git's forms).")
@click.option("--until", "--before", "until", metavar="DATE", help="Only checkpoints at or before DATE.")
@click.option("--grep", metavar="PATTERN", help="Only checkpoints whose commit message matches PATTERN (regex).")
@click.option("-p", "--patch", is_flag=True, help="Each checkpoint's field diff against its parent.")
@click.option("--stat", is_flag=True, help="Each checkpoint's per-field change counts.")
@click.option("--format", "--pretty", "fmt", metavar="FORMAT", help="Each checkpoint as FORMAT (placeholders below).")
def log(name: str | None, limit: int | None, oneline: bool, graph: bool, all_: bool, as_json: bool,
        follow: bool, reverse: bool, since: str | None, until: str | None, grep: str | None, patch: bool,
        stat: bool, fmt: str | None) -> None:
    """Show checkpoints, newest first (default: the current thread).

    NAME is a thread or a checkpoint; its line is followed back through forks. A..B is B's line
    without what A reaches (A.. and ..B: HEAD for the missing side). After --, field names:
    only the checkpoints that changed one of them (and, with -p, only their diffs).

    With --follow NAME is a thread (it may not exist yet): its log oldest first, then each new
    checkpoint as other processes write it, and resets, forks and deletions as lines of their
    own, until interrupted (--json: one object per line, each with a "kind").

    \b
    FORMAT placeholders: %H %h commit, %P %p parents, %s subject, %b body, %B message,
    %at %ai %aI %ad %ar time, %d %D decorations, %n newline, %% percent, %xNN a byte,
    %(id) %(shortid) %(thread) %(step) %(source) %(status) %(changed) %(nchanged) %(superseded).

    \b
    Example:
      qvc log --oneline -n 20 run-7
      qvc log run-7~10..run-7 --reverse -p -- messages
      qvc log --since "2 hours ago" --grep tool --format "%h %(step) %ar"
      qvc log --all --graph
      qvc log --follow --oneline run-7
    """
    # deferred: start-up speed
    from qvc.readers.log import check_format
    from qvc.readers.log import graph as draw
    from qvc.readers.log import log as walk

    fields = click.get_current_context().meta.get("after_dashes", [])
    selecting = bool(reverse or since or until or grep or fields or patch or stat)
    if graph and (as_json or selecting or fmt):
        raise click.UsageError("--graph goes with -n and --all only")
    if fmt is not None:
        fmt = check_format(fmt)
    store = session().store()
    if follow:
        if graph or all_ or selecting:
            raise click.UsageError("--follow takes one thread and -n, --oneline, --format or --json")
        return follow_log(store, name, limit, as_json, lambda e, head: entry_lines(e, head, oneline, fmt),
                          compact=oneline or fmt is not None)
    head = store.current()
    exclude = None
    if all_ and name is None:
        start = None
    else:
        excluded, included = history_range(store, name)
        start, exclude = included.commit, excluded.commit if excluded is not None else None
    if graph:
        text = draw(store, start, limit=limit, all=all_, color=session().color)
        page(text.rstrip("\n").split("\n") if text else [])
        return
    entries = walk(store, start, limit=limit, all=all_, exclude=exclude, fields=fields, since=date(since, "--since"),
                   until=date(until, "--until"), grep=grep, reverse=reverse)
    entries = number_entries(store, entries)  # a run's checkpoints as RUN@N, as `timeline` and `show` name them
    if as_json:
        emit_json([entry_json(store, e, fields, patch or stat) for e in entries])
        return
    lines = []
    for e in entries:
        lines += entry_lines(e, head, oneline, fmt)
        if patch or stat:
            lines += entry_diff(store, e, fields, patch, stat)
    page(lines[:-1] if lines and lines[-1] == "" else lines)


def history_range(store, name: str | None):
    """``(exclude, include)`` revisions for NAME (``A..B`` or one revision; ``RUN@N`` too)."""
    from qvc.store.revisions import parse_range  # deferred: start-up speed

    return parse_range(store, name or "HEAD", names=lambda text: run_names(store, text))


def date(text: str | None, option: str) -> float | None:
    """A ``--since`` / ``--until`` value as a Unix time (git's date forms, :mod:`qvc.readers.dates`)."""
    from qvc.readers.dates import parse_date  # deferred: start-up speed

    if text is None:
        return None
    try:
        return parse_date(text)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def entry_diffs(store, e, fields, *, plain: bool = False) -> list:
    """The field diffs of a log entry against its parent (only ``fields`` when given; an adapter's
    values as plain data with ``plain``, for ``--json``)."""
    from qvc.readers.views import diff_commits  # deferred: start-up speed

    diffs = diff_commits(store, None, e.commit, plain=plain)
    return [d for d in diffs if d.field in fields] if fields else diffs


def entry_json(store, e, fields, with_diff: bool) -> dict:
    """A log entry's ``--json`` form; with -p or --stat, its ``"diff"`` (as ``qvc diff --json``)."""
    data = e.to_json()
    if with_diff:
        from qvc.readers.statediff import to_json  # deferred: start-up speed

        data["diff"] = to_json(entry_diffs(store, e, fields, plain=True))
    return data


def entry_diff(store, e, fields, patch: bool, stat: bool) -> list[str]:
    """The --stat and -p lines printed under a log entry, then a blank line."""
    from qvc.readers.statediff import format_diff, format_stat  # deferred: start-up speed

    diffs = entry_diffs(store, e, fields)
    lines: list[str] = []
    if stat:
        lines += format_stat(diffs).split("\n")
    if patch:
        text = format_diff(diffs, color=session().color, width=value_width())
        if text:
            lines += ([""] if stat else []) + text.split("\n")
    return lines + [""]


def decorations(entry, head) -> str:
    """`` (HEAD -> t, other, superseded)``: the names pointing at a log entry, as git decorates."""
    from qvc.readers.log import decorations as names  # deferred: start-up speed

    found = names(entry, head.thread, head.commit)
    return f" ({', '.join(found)})" if found else ""


def entry_lines(e, head, oneline: bool, fmt: str | None = None) -> list[str]:
    """One log entry as text: ``fmt`` (--format) expanded, one line with --oneline, else a block
    ending in a blank line."""
    if fmt is not None:
        from qvc.readers.log import format_entry  # deferred: start-up speed

        return format_entry(e, fmt, head_thread=head.thread, head_commit=head.commit).split("\n")
    status = f" [{e.status}]" if e.status else ""
    if oneline:
        return [f"{style(e.commit[:7], fg='yellow')} {short(e.checkpoint_id)} "
                f"{shown_name(e.name, e.n) if e.name else f'step {e.step}'} · "
                f"{e.source or 'put'} · {len(e.changed)} changed{status}{style(decorations(e, head), fg='cyan')}"]
    number = f"Run: {shown_name(e.name, e.n)}" if e.name else f"Step: {e.step}"
    return [style(f"checkpoint {e.checkpoint_id}", fg="yellow") + style(decorations(e, head), fg="cyan"),
            f"Commit:  {e.commit[:12]}   Thread: {e.thread}   {number}   "
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
    from qvc.readers.statediff import shorten
    from qvc.readers.views import checkpoint_json, state_of
    from qvc.store.revisions import parse_revision

    store = session().store()
    try:  # RUN@N is the run as it was (show_run), not only its checkpoint
        rev = parse_revision(store, name or "HEAD")
    except NotFoundError:
        if name is None or not show_run(store, name, full, as_json):
            raise
        return
    about = store.commit_info(rev.commit)
    number = run_number(store, about.thread_id, about.checkpoint_id)  # RUN@N for a run's checkpoint
    if as_json:
        data = checkpoint_json(store, rev.commit, fields)
        emit_json({**data, "n": number[0], "name": number[1]} if number else data)
        return
    damaged: dict[str, str] = {}  # fields whose blob does not read: marked, the others shown
    tup = store.read(rev.commit, damaged=damaged)
    info = store.commit_info(rev.commit)
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
             f"Thread:   {cp.thread_id}   "
             + (f"Run: {shown_name(number[1], number[0])}" if number else f"Step: {cp.step}"),
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


@cli.command()
@click.argument("field")
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("--full", is_flag=True, help="Do not shorten long values.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array: path, id, commit, step, time, value.")
def blame(field: str, name: str | None, full: bool, as_json: bool) -> None:
    """Show which checkpoint each part of FIELD comes from (default: at HEAD).

    A list field: each item with the checkpoint that added it; a mapping: each key with the
    checkpoint that gave it its value; anything else: the checkpoint of its last change.

    \b
    Example:
      qvc blame messages run-7
      qvc blame scratch run-7~3 --json
    """
    # deferred: start-up speed
    from qvc.readers.blame import blame as attribute
    from qvc.readers.statediff import format_path, shorten

    store = session().store()
    lines = attribute(store, field, revision(store, name).commit)
    if as_json:
        emit_json([b.to_json() for b in lines])
        return
    width = value_width()
    rows = []
    for b in lines:
        where = format_path(field, b.path)
        head = (f"{style(b.commit[:7], fg='yellow')} {short(b.checkpoint_id):<12} step {str(b.step):<4} "
                f"{datetime.fromtimestamp(b.time).astimezone():%Y-%m-%d %H:%M:%S}  ")
        rows.append(f"{head}{where}: {shorten(b.value, full, max(40, width - len(where) - 50))}")
    page(rows)
