"""The ``qvc`` command line: a thin click shell over the library.

Every command is a library call (:mod:`qvc.store`, :mod:`qvc.store.revisions`, :mod:`qvc.inspect.log`,
:mod:`qvc.inspect.statediff`, :mod:`qvc.inspect.statefiles`, :mod:`qvc.inspect.fsck`,
:mod:`qvc.inspect.status`); this module only parses arguments and prints. Errors are one line
on stderr with a distinct exit status (see :data:`EXIT_CODES`); ``--json`` output is stable and documented in README.md.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime
from typing import Any

import click

from qvc import __version__
from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    NotFoundError,
    QvcError,
    UnknownThreadError,
)
from qvc.inspect.views import iso

EXIT_ERROR = 1  # any other failure (git missing, I/O)
EXIT_USAGE = 2  # bad arguments or input
EXIT_NOT_FOUND = 3  # unknown thread, checkpoint, field
EXIT_CONFLICT = 4  # another writer got there first; a name already taken
EXIT_CORRUPT = 5  # damaged repository (also `qvc fsck` finding problems)
EXIT_DURABILITY = 6  # a flush failed
EXIT_NOT_A_REPO = 128  # no repository here (git's "fatal" status)

EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (NotARepositoryError, EXIT_NOT_A_REPO), (NotFoundError, EXIT_NOT_FOUND), (InvalidInputError, EXIT_USAGE),
    (CheckpointConflictError, EXIT_CONFLICT), (CorruptionError, EXIT_CORRUPT), (DurabilityError, EXIT_DURABILITY),
    (QvcError, EXIT_ERROR),
]

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# -- plumbing of the shell ---------------------------------------------------------------------


class Session:
    """Per-invocation state: where the repository is, output settings, the open store."""

    def __init__(self, repo: str | None, color: str, pager: bool):
        self.repo = repo
        self.color = (color == "always" or color == "auto" and sys.stdout.isatty()
                      and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb")
        self.pager = pager
        self._store = None

    def store(self, write: bool = False):
        """The repository's store, opened on first use (closed when the command ends).

        Reading commands open it read-only: no libgit2 import, no journal, no lock.
        """
        if self._store is None:
            from qvc.store.discovery import find_repository
            from qvc.store.git_store import GitCheckpointStore

            self._store = GitCheckpointStore(find_repository(explicit=self.repo), create=False, readonly=not write)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def session() -> Session:
    return click.get_current_context().find_object(Session)


def style(text: str, **kw: Any) -> str:
    return click.style(text, **kw) if session().color else text


def out(text: str = "") -> None:
    click.echo(text, color=session().color)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, allow_nan=False))


def page(lines: list[str]) -> None:
    """Print ``lines``; through a pager when they do not fit a terminal (never when piped)."""
    s = session()
    text = "\n".join(lines)
    height = terminal_size((80, 24)).lines
    if s.pager and sys.stdout.isatty() and sys.stdin.isatty() and len(lines) > height - 1:
        os.environ.setdefault("LESS", "FRX")  # like git: quit if one screen, keep colors
        pager = os.environ.get("QVC_PAGER") or os.environ.get("PAGER")
        if pager is not None:
            os.environ["PAGER"] = pager
        click.echo_via_pager(text + "\n", color=s.color)
    elif text:
        click.echo(text, color=s.color)


def terminal_size(fallback: tuple[int, int]) -> os.terminal_size:
    """The terminal's size, ``$COLUMNS``/``$LINES`` first (what shutil does, without importing it)."""
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())
    except (AttributeError, ValueError, OSError):
        size = os.terminal_size(fallback)
    columns = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else size.columns
    lines = int(os.environ["LINES"]) if os.environ.get("LINES", "").isdigit() else size.lines
    return os.terminal_size((columns or fallback[0], lines or fallback[1]))


def ago(ts: int | float, now: float | None = None) -> str:
    """``3 minutes ago``: the relative form people read fastest."""
    delta = int((time.time() if now is None else now) - ts)
    if delta < 0:
        return "in the future"
    for unit, size in (("year", 365 * 86400), ("month", 30 * 86400), ("week", 7 * 86400), ("day", 86400),
                       ("hour", 3600), ("minute", 60), ("second", 1)):
        if delta >= size:
            n = delta // size
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def short(checkpoint_id: str) -> str:
    """A checkpoint id short enough to read (long ids are cut; prefixes resolve)."""
    return checkpoint_id if len(checkpoint_id) <= 16 else checkpoint_id[:12]


def revision(store, name: str | None):
    """Resolve a revision (default HEAD) for a command."""
    from qvc.store.revisions import parse_revision

    return parse_revision(store, name or "HEAD")


def complete_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion: thread names (and HEAD) of the repository in reach."""
    from click.shell_completion import CompletionItem

    try:
        from qvc.store.discovery import find_repository
        from qvc.store.git_store import GitCheckpointStore

        root = ctx.find_root().params
        if root.get("chdir"):
            os.chdir(root["chdir"])
        with GitCheckpointStore(find_repository(explicit=root.get("repo")), create=False, readonly=True) as store:
            names = ["HEAD"] + store.threads()
    except (QvcError, OSError):
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


# The order of `qvc --help`: reading history, changing it, runs, following, remotes, the rest.
ORDER = ("init", "status", "log", "show", "diff", "branch", "checkout", "commit", "reset", "reflog",
         "runs", "timeline", "watch", "remote", "push", "fetch", "clone", "serve", "gc", "fsck", "completion")


class Group(click.Group):
    """Commands listed in :data:`ORDER`, then any others in the order they are defined."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(ORDER)))


@click.group(cls=Group, context_settings=CONTEXT)
@click.option("-C", "chdir", metavar="DIR", type=click.Path(file_okay=False),
              help="Run as if qvc was started in DIR.")
@click.option("--repo", metavar="PATH", type=click.Path(file_okay=False),
              help="The repository (default: $QVC_DIR, else .qvc here or in a parent).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colors (auto: on a terminal, unless NO_COLOR is set).")
@click.option("--no-pager", is_flag=True, help="Never page long output.")
@click.version_option(__version__, "--version", prog_name="qvc")
@click.pass_context
def cli(ctx: click.Context, chdir: str | None, repo: str | None, color: str, no_pager: bool) -> None:
    """qvc: git-like checkpoint history of AI agent runs.

    Each thread is a branch, each checkpoint a commit. Name checkpoints by id, unique id
    prefix, commit SHA or prefix, THREAD (its head), HEAD, and suffixes ~N, ^, @{N}.

    \b
    Example:
      qvc log -n 5 run-7
      qvc diff run-7~1 run-7
    """
    if chdir is not None:
        try:
            os.chdir(chdir)
        except OSError as exc:
            raise click.UsageError(f"cannot change to {chdir}: {exc.strerror}") from None
    s = Session(repo, color, not no_pager)
    ctx.obj = s
    ctx.call_on_close(s.close)


# -- init, status ------------------------------------------------------------------------------


@cli.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def init(path: str | None, as_json: bool) -> None:
    """Create a repository (.qvc in the current directory by default).

    \b
    Example:
      qvc init            # ./.qvc
      qvc init runs.qvc
    """
    from qvc.store.discovery import DEFAULT_NAME, is_repository
    from qvc.store.git_store import GitCheckpointStore

    target = os.path.abspath(path or session().repo or os.environ.get("QVC_DIR") or DEFAULT_NAME)
    existed = is_repository(target)
    if os.path.exists(target) and not existed and (not os.path.isdir(target) or os.listdir(target)):
        raise InvalidInputError(f"{target} exists and is not a qvc repository")
    GitCheckpointStore(target).close()
    if as_json:
        emit_json({"path": target, "created": not existed})
    else:
        out(f"{'Reinitialized existing' if existed else 'Initialized empty'} qvc repository in {target}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(as_json: bool) -> None:
    """Show the repository, current thread, head and what needs attention.

    \b
    Example:
      qvc status
    """
    from qvc.inspect.status import status as repo_status

    st = repo_status(session().store())
    if as_json:
        emit_json(st.to_json())
        return
    out(f"repository {st.path}")
    if st.thread is None:
        out(f"HEAD detached at {style(short(st.head_id or ''), fg='yellow')} (step {st.head_step})")
    elif st.head is None:
        out(f"On thread {style(st.thread, fg='green')} (no checkpoints yet)")
    else:
        out(f"On thread {style(st.thread, fg='green')}, head {style(short(st.head_id), fg='yellow')} "
            f"(step {st.head_step})")
    out(f"durability {st.durability} · {st.threads} thread(s) · {st.superseded_lines} superseded line(s) · "
        f"{st.pending_writes} checkpoint(s) with pending writes")
    if st.recovery:
        out(style(f"recovered on open: {st.recovery}", fg="yellow"))
    if st.maintenance_due:
        out(style(f"maintenance due ({st.maintenance_due}): run `qvc gc`", fg="yellow"))
    for r in st.replication:
        age = r["oldest_unreplicated_age"]
        lag = "up to date" if not r["threads_behind"] else f"{r['threads_behind']} thread(s) behind" + (
            f", oldest unreplicated checkpoint from {ago(time.time() - age)}" if age is not None else "")
        last = f", last push {ago(r['last_success'])}" if r["last_success"] else ", never pushed"
        error = f", last error: {r['last_error']}" if r["last_error"] else ""
        out(style(f"replicating to {r['remote']}: {lag}{last}{error}",
                  fg="yellow" if r["threads_behind"] or error else None))


# -- log, show, diff ---------------------------------------------------------------------------


def _decorations(entry, head) -> str:
    names = [f"HEAD -> {t}" if t == head.thread else t for t in entry.heads]
    if head.thread is None and head.commit == entry.commit:
        names.insert(0, "HEAD")
    if entry.superseded:
        names.append("superseded")
    return f" ({', '.join(names)})" if names else ""


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
    from qvc.inspect.log import graph as draw
    from qvc.inspect.log import log as walk

    if graph and as_json:
        raise click.UsageError("--graph and --json do not go together")
    store = session().store()
    if follow:
        if graph or all_:
            raise click.UsageError("--follow takes one thread, not --graph or --all")
        return _follow_log(store, name, limit, oneline, as_json)
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
    lines = [line for e in entries for line in _entry_lines(e, head, oneline)]
    page(lines[:-1] if lines and lines[-1] == "" else lines)


def _entry_lines(e, head, oneline: bool) -> list[str]:
    """One log entry as text: one line with --oneline, else a block ending in a blank line."""
    status = f" [{e.status}]" if e.status else ""
    if oneline:
        return [f"{style(e.commit[:7], fg='yellow')} {short(e.checkpoint_id)} step {e.step} · "
                f"{e.source or 'put'} · {len(e.changed)} changed{status}{style(_decorations(e, head), fg='cyan')}"]
    return [style(f"checkpoint {e.checkpoint_id}", fg="yellow") + style(_decorations(e, head), fg="cyan"),
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
    from qvc.inspect.statediff import shorten
    from qvc.inspect.views import checkpoint_json, state_of

    store = session().store()
    try:
        rev = revision(store, name)
    except NotFoundError:
        if name is None or not _show_run(store, name, full, as_json):
            raise
        return
    if as_json:
        emit_json(checkpoint_json(store, rev.commit, fields))
        return
    tup = store.read(rev.commit)
    info = store.commit(rev.commit)
    cp = tup.checkpoint
    state = state_of(store, rev.commit, cp.state_data)
    for f in fields:
        if f not in state:
            raise NotFoundError(f"checkpoint {short(cp.id)} has no field {f!r} (fields: {', '.join(state) or 'none'})")
    shown = {f: state[f] for f in fields} if fields else state
    parent = tup.parent_config
    width = max(40, terminal_size((100, 24)).columns - 4)
    lines = [style(f"checkpoint {cp.id}", fg="yellow"),
             f"Commit:   {rev.commit}",
             f"Thread:   {cp.thread_id}   Step: {cp.step}",
             f"Parent:   {parent.thread_id}@{parent.checkpoint_id}" if parent else "Parent:   (none)",
             f"Date:     {ago(info.time)} ({cp.created_at or iso(info.time)})"]
    if tup.metadata:
        lines.append(style("Metadata:", bold=True))
        lines += [f"  {k}: {shorten(v, full, width)}" for k, v in tup.metadata.items()]
    lines.append(style(f"State ({len(state)} field{'s' if len(state) != 1 else ''}):", bold=True))
    for f, v in shown.items():
        version = cp.state_versions.get(f)
        lines.append(f"  {style(f, fg='green')}{f' (v{version})' if version else ''}: {shorten(v, full, width)}")
    writes = tup.pending_writes or []
    lines.append(style(f"Pending writes ({len(writes)}):", bold=True) if writes else "Pending writes: none")
    lines += [f"  {w.task_id} {w.channel}: {shorten(w.value, full, width)}" for w in writes]
    page(lines)


@cli.command()
@click.argument("a", shell_complete=complete_names)
@click.argument("b", required=False, shell_complete=complete_names)
@click.option("--stat", is_flag=True, help="Only counts per field.")
@click.option("--full", is_flag=True, help="Do not shorten values.")
@click.option("--json", "as_json", is_flag=True, help="Structured changes as JSON.")
def diff(a: str, b: str | None, stat: bool, full: bool, as_json: bool) -> None:
    """Show which fields changed between two checkpoints, and how.

    With one checkpoint, compares it with its parent; with two, A to B.

    \b
    Example:
      qvc diff run-7            # the head against its parent
      qvc diff run-7~5 run-7 --stat
    """
    from qvc.inspect.statediff import format_diff, format_stat, to_json
    from qvc.inspect.views import diff_commits

    store = session().store()
    ra = revision(store, a)
    diffs = diff_commits(store, None, ra.commit) if b is None else \
        diff_commits(store, ra.commit, revision(store, b).commit)
    if as_json:
        emit_json(to_json(diffs))
    elif stat:
        out(format_stat(diffs))
    else:
        width = max(40, terminal_size((100, 24)).columns - 4)
        text = format_diff(diffs, color=session().color, full=full, width=width)
        page(text.split("\n") if text else [])


# -- runs ----------------------------------------------------------------------------------------


def _show_run(store, ref: str, full: bool, as_json: bool) -> bool:
    """``qvc show RUN`` / ``RUN@MESSAGE_INDEX`` / ``RUN@CHECKPOINT``: ``False`` if no run has that id."""
    from qvc.errors import UnknownRunError
    from qvc.runs import Runs, Snapshot, parse_run_ref

    try:
        parse_run_ref(ref)
        shown = Runs(store).show(ref)
    except (UnknownRunError, InvalidInputError):
        return False
    if as_json:
        emit_json(shown.to_dict())
        return True
    from qvc.inspect.statediff import shorten

    run = shown.run if isinstance(shown, Snapshot) else shown
    width = max(40, terminal_size((100, 24)).columns - 4)
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
    from qvc.runs import Runs

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
    from qvc.runs import Runs

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


# -- threads: branch, checkout, commit, reset, reflog ------------------------------------------


def _fork(store, rev, new: str):
    from qvc.inspect.views import fork_thread

    return fork_thread(store, rev.commit, new)


@cli.command()
@click.argument("names", nargs=-1, shell_complete=complete_names)
@click.option("-v", "--verbose", is_flag=True, help="Head step, status, last update and checkpoint count.")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete threads (refuses when unsafe).")
@click.option("-D", "force_delete", is_flag=True, help="Delete threads, no questions asked.")
@click.option("-m", "--move", "move", is_flag=True, help="Rename: OLD NEW (or NEW for the current thread).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def branch(names: tuple[str, ...], verbose: bool, delete: bool, force_delete: bool, move: bool,
           as_json: bool) -> None:
    """List, fork, delete or rename threads.

    \b
    qvc branch [-v]                 list threads (* marks the current one)
    qvc branch NEW [CHECKPOINT]     fork a new thread (default: from HEAD)
    qvc branch -d THREAD...         delete; refuses the current thread and threads with
                                    lines kept by time travel (use -D)
    qvc branch -m [OLD] NEW         rename

    \b
    Example:
      qvc branch retry-1 run-7~3
    """
    store = session().store(write=bool(delete or force_delete or move or names))
    if sum((delete or force_delete, move)) > 1:
        raise click.UsageError("choose one of -d/-D and -m")
    if delete or force_delete:
        if not names:
            raise click.UsageError("name the thread(s) to delete")
        _delete_threads(store, names, force_delete)
        return
    if move:
        if len(names) not in (1, 2):
            raise click.UsageError("usage: qvc branch -m [OLD] NEW")
        current = store.current()
        old, new = (current.thread, names[0]) if len(names) == 1 else names
        if old is None:
            raise InvalidInputError("HEAD is detached: name the thread to rename")
        store.rename_thread(old, new)
        if current.thread == old:
            store.checkout(new)
        out(f"Renamed thread {old!r} to {new!r}")
        return
    if names:
        if len(names) > 2:
            raise click.UsageError("usage: qvc branch NEW [CHECKPOINT]")
        rev = revision(store, names[1] if len(names) == 2 else None)
        made = _fork(store, rev, names[0])
        source = store.commit(rev.commit).checkpoint_id
        if as_json:
            emit_json({"thread": made.thread_id, "id": made.checkpoint_id, "from": source})
        else:
            out(f"Forked thread {made.thread_id!r} from {short(source)} "
                f"(new checkpoint {short(made.checkpoint_id)})")
        return
    _list_threads(store, verbose or as_json, as_json)


def _delete_threads(store, names: tuple[str, ...], force: bool) -> None:
    from qvc.store.refnames import superseded_prefix

    current = store.current().thread
    for name in names:
        if store.head(name) is None:
            raise UnknownThreadError(f"thread {name!r} not found")
        if not force:
            if name == current:
                raise InvalidInputError(f"cannot delete the current thread {name!r} (checkout another, or use -D)")
            line = {info.hex for info in store.first_parents(store.head(name))}
            kept = [tip for _, tip in store.repository.refs(superseded_prefix(name)) if tip not in line]
            if kept:
                raise InvalidInputError(f"thread {name!r} has {len(kept)} line(s) kept by time travel that would be "
                                        "deleted too (see `qvc log --all`); use -D to delete anyway")
    for name in names:
        head = store.commit(store.head(name))
        store.delete_thread(name)
        out(f"Deleted thread {name} (was {short(head.checkpoint_id)}; data stays until `qvc gc --prune`)")


def _list_threads(store, verbose: bool, as_json: bool) -> None:
    from qvc.inspect.views import thread_json

    current = store.current().thread
    rows = [thread_json(store, thread, thread == current, verbose=verbose) for thread in store.threads()]
    if as_json:
        emit_json(rows)
        return
    width = max((len(r["thread"]) for r in rows), default=0)
    lines = []
    for r in rows:
        mark = "*" if r["current"] else " "
        name = style(r["thread"].ljust(width), fg="green") if r["current"] else r["thread"].ljust(width)
        if not verbose:
            lines.append(f"{mark} {style(r['thread'], fg='green') if r['current'] else r['thread']}")
            continue
        status = f" [{r['status']}]" if r["status"] else ""
        lines.append(f"{mark} {name}  {style(short(r['head_id']), fg='yellow')} step {r['step']}{status} · "
                     f"{r['checkpoints']} checkpoint(s) · updated {ago(r['timestamp'])}")
    page(lines)


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("-b", "new", metavar="NEW", help="Fork a new thread NEW at the checkpoint and switch to it.")
@click.option("--to", "to", metavar="DIR", type=click.Path(file_okay=False),
              help="Write the checkpoint's state to DIR as JSON files (HEAD does not move).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def checkout(name: str | None, new: str | None, to: str | None, as_json: bool) -> None:
    """Switch threads, detach at a checkpoint, fork-and-switch, or export a state to files.

    \b
    qvc checkout THREAD               make THREAD the current thread
    qvc checkout CHECKPOINT           detach HEAD at a checkpoint
    qvc checkout -b NEW [CHECKPOINT]  fork NEW from it (default HEAD) and switch
    qvc checkout [CHECKPOINT] --to DIR
                                      one JSON file per field, to edit and `qvc commit DIR`

    \b
    Example:
      qvc checkout run-7~2 --to fix/ && $EDITOR fix/scratchpad.json && qvc commit fix/ -m "fix plan"
    """
    from qvc.store.revisions import thread_named

    store = session().store(write=to is None)
    if to is not None:
        if new is not None:
            raise click.UsageError("--to and -b do not go together")
        from qvc.inspect.statefiles import write_state

        rev = revision(store, name)
        tup = store.read(rev.commit)
        cp = tup.checkpoint
        files = write_state(cp.state_data, to, meta={"id": cp.id, "thread": cp.thread_id, "step": cp.step,
                                                     "commit": rev.commit})
        if as_json:
            emit_json({"directory": os.path.abspath(to), "id": cp.id, "thread": cp.thread_id, "files": files})
        else:
            out(f"Wrote {len(files)} field(s) of checkpoint {short(cp.id)} (thread {cp.thread_id}, step {cp.step}) "
                f"to {to}; edit them, then `qvc commit {to}`")
        return
    if new is not None:
        made = _fork(store, revision(store, name), new)
        head = store.checkout(new)
        message = f"Switched to a new thread {new!r} (forked at {short(made.checkpoint_id)})"
    elif name is None:
        raise click.UsageError("name a thread or checkpoint (or use -b NEW, --to DIR)")
    elif name == "HEAD" and store.current().thread is not None:
        head = store.current()
        message = f"Already on {head.thread!r}"
    elif thread_named(store, name) is not None and name != "HEAD":
        head = store.checkout(name)
        message = f"Switched to thread {name!r}"
    else:
        rev = revision(store, name)
        head = store.checkout(commit=rev.commit)
        message = f"HEAD is now at {short(store.commit(rev.commit).checkpoint_id)} (detached)"
    if as_json:
        emit_json({"thread": head.thread, "head": head.commit, "detached": head.detached})
    else:
        out(message)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option("-m", "--message", default="", help="Why the state was edited (kept in the metadata).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def commit(directory: str, message: str, as_json: bool) -> None:
    """Store an edited state (from `checkout --to DIR`) as a new checkpoint on the current thread.

    The new checkpoint's parent is the one DIR was written from when it is on the current
    thread (so editing an older checkpoint is time travel: the newer line is kept), else the
    current head. Its metadata has source "update".

    \b
    Example:
      qvc commit fix/ -m "drop the hallucinated tool result"
    """
    from qvc.inspect.statefiles import read_state
    from qvc.types import Checkpoint, CheckpointConfig

    store = session().store(write=True)
    head = store.current()
    if head.thread is None:
        raise InvalidInputError("HEAD is detached: `qvc checkout THREAD` (or `checkout -b NEW`) first")
    state, meta = read_state(directory)
    base = meta.get("commit") if isinstance(meta.get("commit"), str) else None
    if base is not None:
        try:
            info = store.commit(base)
        except CorruptionError:
            base = None
        else:
            if info.thread_id != head.thread:
                base = None
    parent = base or head.commit
    pinfo = store.commit(parent) if parent else None
    step = (pinfo.step or 0) + 1 if pinfo else 0
    import uuid

    cid = uuid.uuid4().hex
    metadata = {"source": "update", "step": step, "message": message, "edited_from": meta.get("id")}
    checkpoint = Checkpoint(id=cid, thread_id=head.thread, step=step, state_data=state,
                            parent_id=pinfo.checkpoint_id if pinfo else None)
    store.put(CheckpointConfig(head.thread), checkpoint, metadata)
    sha = store.head(head.thread)
    changed = store.changed(sha)
    if parent:  # dropped fields changed too (store.changed lists only added and modified ones)
        from qvc.store.format import HEADER
        from qvc.store.refnames import decode_name

        now = store.tree_entries(sha)
        changed += [decode_name(n) for n in store.tree_entries(parent) if n != HEADER and n not in now]
    if as_json:
        emit_json({"thread": head.thread, "id": cid, "commit": sha, "step": step, "changed": changed,
                   "time_travel": bool(head.commit and parent != head.commit)})
        return
    out(f"[{head.thread} {short(cid)}] step {step} · update · {len(changed)} field(s) changed"
        + (f": {', '.join(changed)}" if changed else ""))
    if head.commit and parent != head.commit:
        out("note: the thread had moved on since the state was checked out; the newer checkpoints are "
            "kept as a superseded line (`qvc log --all`)")


@cli.command()
@click.argument("name", shell_complete=complete_names)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def reset(name: str, as_json: bool) -> None:
    """Time-travel the current thread to a checkpoint; the line left behind is kept.

    Undo with `qvc reset THREAD@{1}` (see `qvc reflog`).

    \b
    Example:
      qvc reset HEAD~3
    """
    from qvc.store.refnames import superseded_prefix

    store = session().store(write=True)
    head = store.current()
    if head.thread is None:
        raise InvalidInputError("HEAD is detached: check out a thread to reset it")
    rev = revision(store, name)
    done = store.reset(head.thread, rev.commit)
    info = store.commit(store.head(head.thread))
    kept = (head.commit is not None and head.commit != info.hex
            and store.repository.ref(superseded_prefix(head.thread) + head.commit) is not None)
    if as_json:
        emit_json({"thread": head.thread, "id": done.checkpoint_id, "commit": info.hex, "step": info.step})
    else:
        out(f"HEAD is now at {short(info.checkpoint_id)} (step {info.step}) on {head.thread}"
            + ("; the previous line is kept (`qvc log --all`)" if kept else ""))


@cli.command()
@click.argument("thread", required=False, shell_complete=complete_names)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N entries.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def reflog(thread: str | None, limit: int | None, as_json: bool) -> None:
    """List every movement of a thread's head (default: the current thread), newest first.

    \b
    Example:
      qvc reflog run-7 && qvc reset run-7@{2}
    """
    store = session().store()
    if thread is None or thread == "HEAD":
        thread = store.current().thread
        if thread is None:
            raise InvalidInputError("HEAD is detached: name a thread")
    entries = store.reflog(thread)[:limit] if limit is not None else store.reflog(thread)
    if not entries and store.head(thread) is None:
        raise UnknownThreadError(f"thread {thread!r} not found")
    if as_json:
        emit_json([{"selector": f"{thread}@{{{i}}}", "old": e.old, "new": e.new, "time": iso(e.time),
                    "timestamp": e.time, "message": e.message} for i, e in enumerate(entries)])
        return
    page([f"{style((e.new or '0' * 7)[:7], fg='yellow')} {thread}@{{{i}}}: {e.message} ({ago(e.time)})"
          for i, e in enumerate(entries)])


# -- serve -------------------------------------------------------------------------------------


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8321, show_default=True,
              help="Port (0: any free port).")
@click.option("--read-only", is_flag=True, help="Refuse every action (continue, fork, reset, delete) with 403.")
@click.option("--token", envvar="QVC_SERVE_TOKEN", metavar="TOKEN",
              help="Require this bearer token on every request (default: $QVC_SERVE_TOKEN).")
@click.option("--allow-no-token", is_flag=True, help="Serve a non-loopback host without a token.")
@click.option("--agent", metavar="MODULE:FUNCTION",
              help="Record each continuation with FUNCTION(recorder) (else continuations are detached).")
def serve(host: str, port: int, read_only: bool, token: str | None, allow_no_token: bool, agent: str | None) -> None:
    """Serve the repository over HTTP: a JSON API (OpenAPI at /openapi.json) and a page to browse runs.

    Listens on loopback by default; another host needs --token. Ctrl-C stops it.

    \b
    Example:
      qvc serve --port 0 --read-only
    """
    from qvc.store.discovery import find_repository

    try:
        from qvc.server import load_agent
        from qvc.server import serve as run_server
    except ImportError as exc:
        raise click.ClickException(f'qvc serve needs the server extra ({exc.name} is missing): '
                                   'pip install "qvc[server]"') from None
    path = find_repository(explicit=session().repo)
    run_server(path, host, port, read_only=read_only, token=token, allow_no_token=allow_no_token,
               agent=load_agent(agent) if agent else None,
               on_listen=lambda url: out(f"Serving {path} at {url}" + (" (read-only)" if read_only else "")
                                         + "; Ctrl-C stops"))


# -- maintenance --------------------------------------------------------------------------------


@cli.command()
@click.option("--prune", is_flag=True, help="Also drop deleted checkpoints for good (unrecoverable).")
def gc(prune: bool) -> None:
    """Pack objects and refs with git; --prune also purges deleted data.

    Waits for writers in every process (briefly) and never loses a checkpoint that any
    thread or superseded line still reaches.

    \b
    Example:
      qvc gc --prune
    """
    from qvc.plumbing.maintenance import disk_usage

    store = session().store(write=True)
    before = disk_usage(store.path)
    t0 = time.monotonic()
    store.purge() if prune else store.gc()
    after = disk_usage(store.path)
    out(f"{'Purged and packed' if prune else 'Packed'} {store.path}: {before / 2**20:.1f} MiB -> "
        f"{after / 2**20:.1f} MiB in {time.monotonic() - t0:.1f} s")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fsck(as_json: bool) -> None:
    """Verify the repository: git's object checks, every ref, every checkpoint and pending write.

    Exits with status 5 when it finds problems.

    \b
    Example:
      qvc fsck && echo healthy
    """
    from qvc.inspect.fsck import fsck as check

    report = check(session().store())
    if as_json:
        emit_json(report.to_json())
    else:
        for problem in report.problems:
            click.echo(f"error: {problem}", err=True)
        out(f"checked {report.refs} ref(s), {report.checkpoints} checkpoint(s), "
            f"{report.pending_writes} set(s) of pending writes: "
            + (f"{len(report.problems)} problem(s)" if report else "ok"))
    if report:
        raise SystemExit(EXIT_CORRUPT)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script (thread names included).

    \b
    Example:
      eval "$(qvc completion bash)"
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "qvc", "_QVC_COMPLETE").source())


# -- remotes: remote, push, fetch, clone (qvc.remotes.remote) ------------------------------------------


def _transfer_options(quiet: bool) -> dict:
    """Progress on a terminal (stderr) unless -q; git may ask for credentials only on a terminal."""
    from qvc.remotes.transfer import ProgressBar

    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    return {"progress": None if quiet else ProgressBar(sys.stderr), "interactive": interactive}


def _update_line(u, name: str | None = None) -> str:
    name = name or (u.thread if u.thread is not None and u.ref.startswith("refs/heads/") else u.ref)
    marks = {"new": " * [new]       ", "fast-forward": f"   {(u.old or '')[:7]}..{(u.new or '')[:7]}",
             "forced": f" + {(u.old or '')[:7]}...{(u.new or '')[:7]}", "rejected": " ! [rejected]  ",
             "deleted": " - [deleted]   "}
    mark = marks.get(u.status, "   ")
    line = f"{mark} {name}"
    if u.status == "forced":
        line += " (time travel; the remote's line is kept as superseded)"
    if u.reason:
        line += f" ({u.reason})"
    return style(line, fg="red") if u.status == "rejected" else line


@cli.group(cls=Group)
def remote() -> None:
    """Manage remotes: git servers that hold copies of the history.

    \b
    Example:
      qvc remote add origin git@github.com:me/runs.git
      qvc remote add backup /mnt/backup/runs.git --replicate
      qvc remote list -v
    """


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--replicate", is_flag=True, help="Push every thread to it in the background after each write.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def remote_add(name: str, url: str, replicate: bool, as_json: bool) -> None:
    """Add a remote NAME at URL (a path, git://, ssh://, host:path or http(s)://).

    \b
    Example:
      qvc remote add origin https://git.example.com/team/runs.git
    """
    from qvc.remotes.remote import add_remote

    added = add_remote(session().store(write=True), name, url, replicate=replicate)
    if as_json:
        emit_json({"name": added.name, "url": added.url, "replicate": added.replicate})
    else:
        out(f"Added remote {added.name} {added.url}{' (replicated)' if added.replicate else ''}")


@remote.command("remove")
@click.argument("name")
def remote_remove(name: str) -> None:
    """Remove remote NAME and its remote-tracking refs (nothing changes on the server).

    \b
    Example:
      qvc remote remove backup
    """
    from qvc.remotes.remote import remove_remote

    remove_remote(session().store(write=True), name)
    out(f"Removed remote {name}")


@remote.command("list")
@click.option("-v", "--verbose", is_flag=True, help="Also URLs and replication.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def remote_list(verbose: bool, as_json: bool) -> None:
    """List remotes.

    \b
    Example:
      qvc remote list -v
    """
    from qvc.remotes.remote import remote_threads, remotes

    store = session().store()
    found = remotes(store)
    if as_json:
        emit_json([{"name": r.name, "url": r.url, "replicate": r.replicate,
                    "threads": len(remote_threads(store, r.name))} for r in found])
        return
    for r in found:
        out(f"{r.name}\t{r.url}{'  (replicated)' if r.replicate else ''}" if verbose else r.name)


@remote.command("replicate")
@click.argument("name")
@click.option("--off", is_flag=True, help="Stop replicating to NAME.")
def remote_replicate(name: str, off: bool) -> None:
    """Replicate every write to remote NAME in the background (or stop, with --off).

    \b
    Example:
      qvc remote replicate backup
    """
    from qvc.remotes.remote import set_replicate

    set_replicate(session().store(write=True), name, not off)
    out(f"{'Stopped replicating' if off else 'Replicating'} to {name}")


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False, default="origin")
@click.argument("threads", nargs=-1, shell_complete=complete_names)
@click.option("-q", "--quiet", is_flag=True, help="No progress and no per-ref lines.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def push(remote_name: str, threads: tuple[str, ...], quiet: bool, as_json: bool) -> None:
    """Push threads (default: all) to REMOTE (default: origin), with their superseded lines
    and pending writes. Only what changed is sent. Exits with status 4 if the server or a
    newer remote line rejected any ref (each is listed with its reason).

    \b
    Example:
      qvc push                    # every thread to origin
      qvc push backup run-7 run-8
    """
    from qvc.errors import PushRejectedError

    store = session().store(write=True)
    try:
        result = store.push(remote_name, list(threads) or None, **_transfer_options(quiet or as_json))
    except PushRejectedError as exc:
        result = exc.result
        _report_push(result, quiet, as_json)
        raise
    _report_push(result, quiet, as_json)


def _report_push(result, quiet: bool, as_json: bool) -> None:
    from qvc.remotes.transfer import human_bytes

    if as_json:
        emit_json(result.to_json())
        return
    changed = [u for u in result.updates if u.status != "up-to-date"]
    if not changed:
        if not quiet:
            out(f"Everything up to date with {result.remote}")
        return
    if not quiet:
        out(f"To {result.url}")
        for u in changed:
            out(_update_line(u))
        out(f"pushed {len(result.pushed)} ref(s), {result.objects} object(s), {human_bytes(result.bytes)}")


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False, default="origin")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no per-ref lines.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fetch(remote_name: str, quiet: bool, as_json: bool) -> None:
    """Fetch REMOTE's threads (default: origin) as REMOTE/THREAD, with their lines and writes.

    Read them with `qvc log origin/THREAD`, fork one with `qvc checkout -b NEW origin/THREAD`.

    \b
    Example:
      qvc fetch && qvc log origin/run-7
    """
    result = session().store(write=True).fetch(remote_name, **_transfer_options(quiet or as_json))
    if as_json:
        emit_json(result.to_json())
        return
    if quiet:
        return
    heads = [u for u in result.updates if u.ref.startswith("refs/remotes/")]
    if heads:
        out(f"From {result.url}")
    from qvc.store.refnames import decode_thread

    prefix = f"refs/remotes/{result.remote}/"
    for u in heads:
        component = u.ref[len(prefix):]
        out(_update_line(u, f"{result.remote}/{decode_thread(component) or component}"))
    for u in result.conflicts:
        out(style(f" ! pending writes of {u.ref[-40:][:12]}: {u.reason}", fg="yellow"))
    if not heads:
        out(f"{result.remote}: up to date ({len(result.threads)} thread(s))")


@cli.command()
@click.argument("url")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("-o", "--origin", "origin", default="origin", show_default=True, help="Name of the remote.")
@click.option("-q", "--quiet", is_flag=True, help="No progress.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def clone(url: str, directory: str | None, origin: str, quiet: bool, as_json: bool) -> None:
    """Clone the repository at URL into DIRECTORY (default: the URL's last part + .qvc).

    \b
    Example:
      qvc clone https://git.example.com/team/runs.git
      qvc clone /mnt/backup/runs.git local.qvc && qvc -C local.qvc log --all
    """
    from qvc.remotes.remote import clone as clone_repository

    if directory is None:
        base = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        for suffix in (".git", ".qvc"):
            base = base[: -len(suffix)] if base.endswith(suffix) else base
        directory = (base or "clone") + ".qvc"
    with clone_repository(url, directory, remote=origin, **_transfer_options(quiet or as_json)) as store:
        threads = store.threads()
        path = store.path
    if as_json:
        emit_json({"path": path, "url": url, "remote": origin, "threads": len(threads)})
    elif not quiet:
        out(f"Cloned {url} into {path}: {len(threads)} thread(s)")


# -- following live (qvc.inspect.watch) -----------------------------------------------------------------


def _stream(watcher, show, first=()) -> None:
    """Print the lines of ``first``, then the lines ``show(event)`` returns as events come,
    flushed, until Ctrl-C, SIGTERM or a closed pipe (all a quiet exit 0)."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with watcher:
            for line in first:
                out(line)
            for event in watcher:
                for line in show(event):
                    out(line)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `qvc watch | head -3` (click would turn it into exit 1)
        _silence_stdout()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _event_line(e) -> str:
    """One event as a line of text (``--json`` prints :meth:`qvc.inspect.watch.WatchEvent.to_json`)."""
    what = {
        "checkpoint": lambda: f"{e.thread_id} {short(e.checkpoint_id)} step {e.step} · {e.source} "
                              f"{style(e.commit[:7], fg='yellow')}",
        "fork": lambda: f"{e.thread_id} from {e.from_thread} {short(e.from_checkpoint_id)}",
        "reset": lambda: f"{e.thread_id} {e.previous[:7]} -> {style(e.commit[:7], fg='yellow')} "
                         f"{short(e.checkpoint_id)} step {e.step}{f' ({e.cause})' if e.cause else ''}",
        "delete": lambda: f"{e.thread_id} (was {e.previous[:7]})",
        "rename": lambda: f"{e.from_thread} -> {e.thread_id}",
        "writes": lambda: f"{e.thread_id} {short(e.checkpoint_id or '?')} {(e.commit or '')[:7]}",
        "head": lambda: e.thread_id if e.thread_id is not None else f"detached at {(e.commit or '')[:7]}",
    }[e.kind]()
    return f"{datetime.fromtimestamp(e.observed):%H:%M:%S} {style(f'{e.kind:<10}', fg='cyan')} {what}"


@cli.command()
@click.argument("threads", nargs=-1, shell_complete=complete_names)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--poll", "poll", type=click.FloatRange(min=0.001), metavar="SECONDS",
              help="Poll the refs every SECONDS instead of waiting for inotify.")
def watch(threads: tuple[str, ...], as_json: bool, poll: float | None) -> None:
    """Print checkpoints, forks, resets, deletions, renames, pending writes and HEAD moves as
    other processes make them, one line each, until interrupted (default: every thread).

    \b
    Example:
      qvc watch
      qvc watch run-7 --json | jq .id
    """
    store = session().store()
    kw = {"hints": "poll", "poll_interval": poll} if poll else {}
    show = (lambda e: [json.dumps(e.to_json(), ensure_ascii=False)]) if as_json else (lambda e: [_event_line(e)])
    _stream(store.watch(threads or None, **kw), show)


def _follow_log(store, name: str | None, limit: int | None, oneline: bool, as_json: bool) -> None:
    """``qvc log --follow``: the thread's log, then its new checkpoints as log entries."""
    from qvc.inspect.log import entry, log

    head = store.current()
    thread = head.thread if name in (None, "HEAD") else name
    if thread is None:
        raise click.UsageError("HEAD is detached: name the thread to follow")
    watcher = store.watch([thread])  # before the log is read: nothing falls in between
    shown: set[str] = set()

    def lines(e) -> list[str]:
        shown.add(e.commit)
        return [json.dumps(e.to_json(), ensure_ascii=False)] if as_json else _entry_lines(e, head, oneline)

    def show(event) -> list[str]:
        if event.kind != "checkpoint" or event.commit in shown:
            return []
        return lines(entry(store, event.commit, {event.commit: [thread]}))

    tip = store.head(thread)
    first = (line for e in (log(store, tip, limit=limit) if tip is not None else ()) for line in lines(e))
    _stream(watcher, show, first)


# -- entry point --------------------------------------------------------------------------------


def exit_code(exc: BaseException) -> int:
    """The exit status for a library error (see the table in README.md)."""
    return next(code for kind, code in EXIT_CODES if isinstance(exc, kind))


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return its exit status. Errors are one line on stderr, never a traceback."""
    def fail(message: str, code: int) -> int:
        click.echo(f"qvc: {message}".splitlines()[0], err=True)
        return code

    try:
        result = cli.main(args=argv, prog_name="qvc", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        return fail(exc.format_message() + hint, EXIT_USAGE)
    except click.ClickException as exc:
        return fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        return fail("aborted", EXIT_ERROR)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except QvcError as exc:
        return fail(str(exc), exit_code(exc))
    except BrokenPipeError:  # `qvc log | head`: the reader left; not an error
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except OSError as exc:
        return fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", EXIT_ERROR)


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run() -> None:
    """The console script."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    sys.exit(code)

