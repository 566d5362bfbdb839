"""Remotes (:mod:`qvc.remotes`): ``qvc remote add/remove/list/replicate``, ``qvc push``,
``qvc fetch`` and ``qvc clone``."""

from __future__ import annotations

import sys

import click

from qvc.cli.app import Group, cli, complete_names, session
from qvc.cli.output import emit_json, out, style
from qvc.errors import PushRejectedError


def transfer_options(quiet: bool) -> dict:
    """Progress on a terminal (stderr) unless -q; git may ask for credentials only on a terminal."""
    from qvc.remotes.transfer import ProgressBar  # deferred: start-up speed

    interactive = sys.stdin.isatty() and sys.stderr.isatty()
    return {"progress": None if quiet else ProgressBar(sys.stderr), "interactive": interactive}


def update_line(u, name: str | None = None) -> str:
    """One ref a push or fetch updated, as git prints it (`` * [new]  t``, ``   a..b  t``, ...)."""
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


@cli.group(cls=Group, invoke_without_command=True)
@click.option("-v", "--verbose", is_flag=True, help="Without a command: also URLs (as `qvc remote list -v`).")
@click.option("--json", "as_json", is_flag=True, help="Without a command: as `qvc remote list --json`.")
@click.pass_context
def remote(ctx: click.Context, verbose: bool, as_json: bool) -> None:
    """Manage remotes: git servers that hold copies of the history.

    Alone, lists the remotes' names (-v adds their URLs), as `git remote` does.

    \b
    Example:
      qvc remote -v
      qvc remote add origin git@github.com:me/runs.git
      qvc remote add backup /mnt/backup/runs.git --replicate
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(remote_list, verbose=verbose, as_json=as_json)
    elif verbose or as_json:
        raise click.UsageError("-v and --json go after the command (`qvc remote list -v`)")


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
    from qvc.remotes.remote import add_remote  # deferred: start-up speed

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
    from qvc.remotes.remote import remove_remote  # deferred: start-up speed

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
    from qvc.remotes.remote import remote_threads, remotes  # deferred: start-up speed

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
    from qvc.remotes.remote import set_replicate  # deferred: start-up speed

    set_replicate(session().store(write=True), name, not off)
    out(f"{'Stopped replicating' if off else 'Replicating'} to {name}")


def default_remote(store, name: str | None) -> str:
    """REMOTE as given, else the current thread's upstream (`qvc push -u`), else ``origin`` (as git)."""
    from qvc.remotes.remote import upstream  # deferred: start-up speed

    if name is not None:
        return name
    head = store.current_or_none()
    return upstream(store, head.thread if head is not None else None) or "origin"


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False)
@click.argument("threads", nargs=-1, shell_complete=complete_names)
@click.option("-f", "--force", is_flag=True,
              help="Push threads the remote rewound or moved elsewhere anyway (keeping its line as superseded).")
@click.option("--force-with-lease", is_flag=True,
              help="As --force, only where the remote is where the last fetch left REMOTE/THREAD.")
@click.option("-u", "--set-upstream", "upstream", is_flag=True,
              help="Record REMOTE as the pushed threads' upstream (git's branch.<thread>.remote).")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no per-ref lines.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def push(remote_name: str | None, threads: tuple[str, ...], force: bool, force_with_lease: bool, upstream: bool,
         quiet: bool, as_json: bool) -> None:
    """Push threads (default: all) to REMOTE (default: origin), with their superseded lines
    and pending writes. Only what changed is sent. Exits with status 4 if the server or a
    newer remote line rejected any ref (each is listed with its reason), among them a thread
    whose push would undo a time travel made on the remote (--force pushes it).

    \b
    Example:
      qvc push                    # every thread to origin
      qvc push backup run-7 run-8
      qvc push -u origin run-7    # and record origin as run-7's upstream
    """
    from qvc.remotes import push as push_threads  # deferred: start-up speed

    store = session().store(write=True)
    try:
        result = push_threads(store, default_remote(store, remote_name), list(threads) or None, force=force,
                              force_with_lease=force_with_lease, **transfer_options(quiet or as_json))
    except PushRejectedError as exc:
        result = exc.result
        report_push(result, quiet, as_json)
        raise
    report_push(result, quiet, as_json)
    if upstream:
        from qvc.remotes.remote import set_upstream  # deferred: start-up speed

        for u in result.updates:
            if u.thread is not None and u.ref.startswith("refs/heads/"):
                set_upstream(store, u.thread, result.remote)
                if not (quiet or as_json):
                    out(f"thread {u.thread!r} set up to track {result.remote}/{u.thread}")


def report_push(result, quiet: bool, as_json: bool) -> None:
    """What ``qvc push`` prints about a :class:`~qvc.remotes.remote.PushResult`."""
    from qvc.remotes.transfer import human_bytes  # deferred: start-up speed

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
            out(update_line(u))
        out(f"pushed {len(result.pushed)} ref(s), {result.objects} object(s), {human_bytes(result.bytes)}")


@cli.command()
@click.argument("remote_name", metavar="[REMOTE]", required=False)
@click.argument("threads", nargs=-1)
@click.option("--all", "all_remotes", is_flag=True, help="Fetch from every configured remote.")
@click.option("--refetch", is_flag=True,
              help="Fetch every object again, not only what is new: restores objects lost here (then `qvc gc`).")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no per-ref lines.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (with --all: an array).")
def fetch(remote_name: str | None, threads: tuple[str, ...], all_remotes: bool, refetch: bool, quiet: bool,
          as_json: bool) -> None:
    """Fetch REMOTE's threads (default: origin; or only THREAD...) as REMOTE/THREAD, with their lines and writes.

    Read them with `qvc log origin/THREAD`, fork one with `qvc checkout -b NEW origin/THREAD`.
    Naming threads fetches only those (and the pending writes of their checkpoints), however
    many the remote holds.

    \b
    Example:
      qvc fetch && qvc log origin/run-7
      qvc fetch origin run-7 run-9
      qvc fetch --all
      qvc fetch --refetch origin && qvc gc     # objects lost here (`qvc fsck` names them)
    """
    # deferred: start-up speed
    from qvc.remotes import fetch as fetch_threads
    from qvc.remotes import remotes as configured

    store = session().store(write=True)
    if all_remotes:
        if remote_name is not None:
            raise click.UsageError("--all fetches every remote: name none")
        names = [r.name for r in configured(store)]
    else:
        names = [default_remote(store, remote_name)]
    results = [fetch_threads(store, name, list(threads) if threads else None, refetch=refetch,
                             **transfer_options(quiet or as_json))
               for name in names]
    if as_json:
        emit_json([r.to_json() for r in results] if all_remotes else results[0].to_json())
        return
    if not quiet:
        for result in results:
            report_fetch(result)


def report_fetch(result) -> None:
    """What ``qvc fetch`` prints about a :class:`~qvc.remotes.remote.FetchResult`."""
    from qvc.store.refnames import decode_thread  # deferred: start-up speed

    heads = [u for u in result.updates if u.ref.startswith("refs/remotes/")]
    if heads:
        out(f"From {result.url}")
    prefix = f"refs/remotes/{result.remote}/"
    for u in heads:
        component = u.ref[len(prefix):]
        out(update_line(u, f"{result.remote}/{decode_thread(component) or component}"))
    for u in result.conflicts:
        out(style(f" ! pending writes of {u.ref[-40:][:12]}: {u.reason}", fg="yellow"))
    if not heads:
        out(f"{result.remote}: up to date ({len(result.threads)} thread(s))")


@cli.command()
@click.argument("url")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("-o", "--origin", "origin", default="origin", show_default=True, help="Name of the remote.")
@click.option("--thread", "patterns", multiple=True, metavar="PATTERN",
              help="Only threads matching PATTERN (one '*' allowed); repeatable.")
@click.option("--allowed-signers", "allowed", metavar="FILE", type=click.Path(dir_okay=False),
              help="Require signatures: keep the clone only if every commit verifies against FILE "
                   "(an allowed signers file), and refuse unsigned writes and fetches from then on.")
@click.option("-q", "--quiet", is_flag=True, help="No progress.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def clone(url: str, directory: str | None, origin: str, patterns: tuple[str, ...], allowed: str | None,
          quiet: bool, as_json: bool) -> None:
    """Clone the repository at URL into DIRECTORY (default: the URL's last part + .qvc).

    \b
    Example:
      qvc clone https://git.example.com/team/runs.git
      qvc clone /mnt/backup/runs.git local.qvc && qvc -C local.qvc log --all
      qvc clone --thread 'run-7*' git://ci.example.com/fleet.git
      qvc clone --allowed-signers team_signers https://git.example.com/team/audited.git
    """
    from qvc.remotes.remote import clone as clone_repository  # deferred: start-up speed

    if directory is None:
        base = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        for suffix in (".git", ".qvc"):
            base = base[: -len(suffix)] if base.endswith(suffix) else base
        directory = (base or "clone") + ".qvc"
    with clone_repository(url, directory, remote=origin, threads=list(patterns) if patterns else None,
                          allowed_signers=allowed, **transfer_options(quiet or as_json)) as store:
        threads = store.threads()
        path = store.path
    if as_json:
        emit_json({"path": path, "url": url, "remote": origin, "threads": len(threads)})
    elif not quiet:
        out(f"Cloned {url} into {path}: {len(threads)} thread(s)")
