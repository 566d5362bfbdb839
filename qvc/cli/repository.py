"""``qvc init`` and ``qvc status``: creating a repository and seeing how it is doing."""

from __future__ import annotations

import os
import time

import click

from qvc.cli.app import cli, session
from qvc.cli.output import emit_json, out, qname, short, style, warn
from qvc.errors import OBJECTS_REPAIR, InvalidInputError
from qvc.readers.dates import ago


@cli.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def init(path: str | None, as_json: bool) -> None:
    """Create a repository (.qvc in the current directory by default).

    It is built aside and renamed into place: a failure (a full disk: one line, exit 1) leaves
    nothing behind.

    \b
    Example:
      qvc init            # ./.qvc
      qvc init runs.qvc
    """
    # deferred: start-up speed (the store layer)
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
    from qvc.readers.status import status as repo_status  # deferred: start-up speed

    st = repo_status(session().store())
    unreadable = st.damaged is not None and st.thread is None and st.head is None  # HEAD itself
    if st.damaged and not unreadable:
        warn(st.damaged if st.head is None else
             f"{'thread ' + repr(st.thread) if st.thread else 'HEAD'} is damaged: {st.damaged}; {OBJECTS_REPAIR}")
    for problem in st.problems:
        warn(problem)
    if as_json:
        emit_json(st.to_json())
        return
    out(f"repository {st.path}")
    if unreadable:
        out(style(f"HEAD is damaged: {st.damaged}", fg="red"))
    elif st.thread is None:
        out(f"HEAD detached at {style(short(st.head_id or ''), fg='yellow')} (step {st.head_step})")
    elif st.damaged and st.head is None:  # its ref file holds no ref
        out(f"On thread {style(qname(st.thread), fg='green')} (damaged)")
    elif st.damaged:
        out(f"On thread {style(qname(st.thread), fg='green')}, head {style(st.head[:12], fg='red')} (damaged)")
    elif st.head is None:
        out(f"On thread {style(qname(st.thread), fg='green')} (no checkpoints yet)")
    else:
        out(f"On thread {style(qname(st.thread), fg='green')}, head {style(short(st.head_id), fg='yellow')} "
            f"(step {st.head_step})")
    out(f"durability {st.durability} · {st.threads} thread(s) · {st.superseded_lines} superseded line(s) · "
        f"{st.pending_writes} checkpoint(s) with pending writes")
    if st.recovery:
        out(style(f"recovered on open: {st.recovery}", fg="yellow"))
    for folder in st.quarantine:
        out(style(f"files moved aside by a repair: {folder} (nothing reads them; look, then delete it)",
                  fg="yellow"))
    if st.maintenance_due:
        out(style(f"maintenance due ({st.maintenance_due}): run `qvc gc`", fg="yellow"))
    if st.failures:
        out(style(f"{st.failures} checkpoint failure(s) recorded (qvc/failures.log); the last:", fg="red"))
        for f in st.last_failures:
            what = f"run {f['run_id']}" if f.get("run_id") else f"session {f.get('session_id')}"
            out(style(f"  {ago(float(f.get('time') or 0))}  {f.get('operation')} of {what}: "
                      f"{f.get('cause')}", fg="red"))
    for r in st.replication:
        age = r["oldest_unreplicated_age"]
        lag = "up to date" if not r["threads_behind"] else f"{r['threads_behind']} thread(s) behind" + (
            f", oldest unreplicated checkpoint from {ago(time.time() - age)}" if age is not None else "")
        last = f", last push {ago(r['last_success'])}" if r["last_success"] else ", never pushed"
        error = f", last error: {r['last_error']}" if r["last_error"] else ""
        out(style(f"replicating to {r['remote']}: {lag}{last}{error}",
                  fg="yellow" if r["threads_behind"] or error else None))
