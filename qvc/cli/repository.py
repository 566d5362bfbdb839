"""``qvc init``, ``qvc status`` and ``qvc config``: creating a repository, seeing how it is doing,
and its settings."""

from __future__ import annotations

import os
import time

import click

from qvc.cli.app import cli, revision, session
from qvc.cli.output import emit_json, out, qname, short, style, warn
from qvc.errors import OBJECTS_REPAIR, InvalidInputError, NotFoundError
from qvc.readers.dates import ago


@cli.command("config")
@click.argument("name", required=False)
@click.argument("value", required=False)
@click.option("-l", "--list", "listing", is_flag=True, help="List every setting of the repository.")
@click.option("--unset", is_flag=True, help="Remove the setting NAME.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (with --list).")
def config(name: str | None, value: str | None, listing: bool, unset: bool, as_json: bool) -> None:
    """Get and set the repository's own settings (its git config file), as git config --local.

    \b
    qvc config NAME              print NAME's value (exit 1, nothing printed, when unset)
    qvc config NAME VALUE        set it
    qvc config --unset NAME      remove it
    qvc config --list [--json]   every setting, NAME=VALUE

    qvc's own: qvc.signingKey (a key file that signs every commit; relative: to the repository)
    and qvc.requireSignatures (refuse unsigned writes and fetches); see docs/signing.md.

    \b
    Example:
      qvc config qvc.requireSignatures true
      qvc config qvc.signingKey ~/.ssh/qvc_ed25519
    """
    if listing:
        if name is not None or unset:
            raise click.UsageError("--list takes no NAME and no --unset")
        settings = session().store().config()  # a read: no lock, as git config reads
        if as_json:
            emit_json(settings)
        else:
            for key, setting in settings.items():
                out(f"{key}={setting}")
        return
    if name is None:
        raise click.UsageError("name a setting (or --list)")
    store = session().store(write=unset or value is not None)  # reading one takes no lock
    if unset:
        if value is not None:
            raise click.UsageError("--unset takes NAME only")
        if name.lower() not in store.config():
            raise NotFoundError(f"{name} is not set")
        store.set_config(name, None)
    elif value is None:
        found = store.config().get(name.lower()) if "." in name else None
        if found is None:
            raise SystemExit(1)  # as git config: unset is exit 1, nothing printed
        out(found)
    else:
        store.set_config(name, value)


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
@click.option("-s", "--short", "short_form", is_flag=True,
              help="One line per thing that needs attention (nothing when all is well), as `git status -s`.")
@click.option("-b", "--branch", "with_branch", is_flag=True, help="With -s: the current thread first (`## THREAD`).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(short_form: bool, with_branch: bool, as_json: bool) -> None:
    """Show the repository, current thread, head and what needs attention.

    \b
    Example:
      qvc status
      qvc status -sb
    """
    from qvc.readers.status import status as repo_status  # deferred: start-up speed

    st = repo_status(session().store())
    unreadable = st.damaged is not None and st.thread is None and st.head is None  # HEAD itself
    if st.damaged and not unreadable and not short_form:
        warn(st.damaged if st.head is None else
             f"{'thread ' + repr(st.thread) if st.thread else 'HEAD'} is damaged: {st.damaged}; {OBJECTS_REPAIR}")
    for problem in st.problems:
        warn(problem)
    if as_json:
        emit_json(st.to_json())
        return
    if short_form:
        return short_status(st, with_branch, unreadable)
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


def short_status(st, with_branch: bool, unreadable: bool) -> None:
    """``qvc status -s [-b]``: ``## THREAD`` with -b, then ``!! what`` for each thing that needs
    attention (what the long form prints in colour), nothing more."""
    if with_branch:
        if unreadable:
            out("## HEAD (damaged)")
        elif st.thread is None:
            out("## HEAD (no thread)")
        elif st.head is None:
            out(f"## No checkpoints yet on {qname(st.thread)}")
        else:
            out(f"## {qname(st.thread)}")
    items = [f"{'HEAD' if unreadable or not st.thread else 'thread ' + qname(st.thread)} is damaged: {st.damaged}"
             ] if st.damaged else []
    items += [f"recovered on open: {st.recovery}"] if st.recovery else []
    items += [f"files moved aside by a repair: {folder}" for folder in st.quarantine]
    items += [f"maintenance due ({st.maintenance_due}): run `qvc gc`"] if st.maintenance_due else []
    items += [f"{st.failures} checkpoint failure(s) recorded (qvc/failures.log)"] if st.failures else []
    items += [f"replicating to {r['remote']}: {r['threads_behind']} thread(s) behind"
              for r in st.replication if r["threads_behind"]]
    items += [f"replicating to {r['remote']}: last error: {r['last_error']}" for r in st.replication if r["last_error"]]
    for item in items:
        out(style(f"!! {item}", fg="red"))


class RevParseCommand(click.Command):
    """``--short`` alone or as git's ``--short=N`` (never taking the next argument as its N)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        spelled = []
        for arg in args:
            spelled += ["--short", "--abbrev", arg[len("--short="):]] if arg.startswith("--short=") else [arg]
        return super().parse_args(ctx, spelled)


@cli.command("rev-parse", cls=RevParseCommand)
@click.argument("names", nargs=-1, required=True, metavar="REVISION...")
@click.option("--short", "shorten", is_flag=True,
              help="The shortest unique prefix of the SHA: 7 characters or more (--short=N: N or more).")
@click.option("--abbrev", "length", type=click.IntRange(4, 40, clamp=True), default=7, hidden=True)
@click.option("--abbrev-ref", is_flag=True, help="A thread's name rather than its SHA (HEAD: the current thread).")
def rev_parse(names: tuple[str, ...], shorten: bool, length: int, abbrev_ref: bool) -> None:
    """Print the commit SHA each REVISION names, one per line, as `git rev-parse` does.

    \b
    Example:
      qvc rev-parse run-7~2           # the full commit SHA
      qvc rev-parse --short HEAD      # its shortest unique prefix (7 or more characters)
      qvc rev-parse --abbrev-ref HEAD # the current thread ("HEAD" when detached)
    """
    from qvc.store.revisions import thread_named  # deferred: start-up speed

    store = session().store()
    for name in names:
        if abbrev_ref and name in ("HEAD", "@"):
            out(qname(store.current().thread or "HEAD"))
            continue
        if abbrev_ref and thread_named(store, name) is not None:
            out(qname(name))
            continue
        sha = revision(store, name).commit
        out(unique_prefix(store, sha, length) if shorten else sha)


def unique_prefix(store, sha: str, length: int) -> str:
    """The shortest prefix of ``sha``, at least ``length`` long, that names it alone (no other
    commit SHA or checkpoint id begins with it), so typing it back gives the same commit."""
    from qvc.errors import QvcError  # deferred: start-up speed

    for n in range(length, len(sha)):
        try:
            if store.resolve(sha[:n]) == sha:
                return sha[:n]
        except QvcError:  # ambiguous: one character more
            continue
    return sha
