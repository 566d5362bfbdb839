"""Threads and time travel: ``qvc branch`` (list, fork, delete, rename), ``qvc checkout``
(``--to DIR`` is :mod:`qvc.cli.workdir`), ``qvc reset`` and ``qvc reflog``."""

from __future__ import annotations

import click

from qvc.cli.app import cli, complete_names, revision, session
from qvc.cli.output import emit_json, out, page, qname, short, style, warn, warn_damaged
from qvc.cli.runs import fork_run, run_named
from qvc.cli.workdir import checkout_to, kept_note
from qvc.errors import (
    OBJECTS_REPAIR,
    CheckpointConflictError,
    CorruptionError,
    DamagedRefError,
    InvalidInputError,
    InvalidThreadIdError,
    UnknownCheckpointError,
    UnknownThreadError,
)
from qvc.readers.dates import ago
from qvc.readers.views import iso
from qvc.types import Head


def new_thread_name(name: str) -> str:
    """``name``, typed to create a thread, if git would take it as a branch name; else
    :class:`~qvc.errors.InvalidThreadIdError` (exit 2) saying why."""
    from qvc.store.refnames import branch_name_problem  # deferred: start-up speed

    problem = branch_name_problem(name)
    if problem is not None:
        raise InvalidThreadIdError(f"{name!r} is not a valid thread name: {problem} (git's branch name rules)")
    return name


def new_name_problem(name: str) -> str | None:
    """Why ``name`` could not be a new thread's name (git's branch name rules), or ``None``."""
    from qvc.store.refnames import branch_name_problem  # deferred: start-up speed

    return branch_name_problem(name)


def shown(name: str) -> str:
    """``name`` quoted for a message, cut when long (:func:`qvc.store.refnames.shown`)."""
    from qvc.store.refnames import shown as cut  # deferred: start-up speed

    return cut(name)


def unborn(store, name: str) -> Head:
    """Point HEAD at the new thread ``name`` (typed: checked), which has no checkpoint yet; its
    first checkpoint creates it. A thread of that name is refused (exit 4), as git refuses it."""
    if store.head(new_thread_name(name)) is not None:
        raise CheckpointConflictError(f"thread {name!r} already exists (`qvc checkout {name}` switches to it)")
    return store.checkout(name)


def current_head(store) -> Head | None:
    """What HEAD stands for, or ``None`` (after a one-line warning) when HEAD itself is damaged:
    listing and deleting threads still work then, and ``qvc checkout THREAD`` repairs it. When
    HEAD names a thread whose ref file holds no ref, that thread without a head (after a warning)."""
    try:
        return store.current()
    except DamagedRefError as exc:
        warn(str(exc))
        return Head(store.ref_thread(exc.ref), None)
    except CorruptionError as exc:
        warn(f"HEAD is damaged: {exc}")
        return None


def fork(store, rev, new: str):
    """Fork thread ``new`` (a name typed by the user: checked) from revision ``rev``; its new head's config."""
    from qvc.store.fork import fork_thread  # deferred: start-up speed

    return fork_thread(store, rev.commit, new_thread_name(new))


@cli.command()
@click.argument("names", nargs=-1, shell_complete=complete_names)
@click.option("-v", "--verbose", is_flag=True, help="Head step, status, last update and checkpoint count.")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete threads (refuses when unsafe).")
@click.option("-D", "force_delete", is_flag=True,
              help="Delete threads even with kept lines or a damaged ref (never the current one).")
@click.option("-m", "--move", "move", is_flag=True, help="Rename: OLD NEW (or NEW for the current thread).")
@click.option("-f", "--force", is_flag=True,
              help="NEW CHECKPOINT: move an existing thread NEW there (time travel); with -d: as -D.")
@click.option("-r", "--remotes", "remote_only", is_flag=True, help="List the remote threads (REMOTE/THREAD).")
@click.option("-a", "--all", "all_", is_flag=True, help="List the threads and the remote threads.")
@click.option("--contains", metavar="CHECKPOINT", help="List only threads whose line holds CHECKPOINT.")
@click.option("--show-current", is_flag=True, help="Print the current thread's name (nothing when detached).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def branch(names: tuple[str, ...], verbose: bool, delete: bool, force_delete: bool, move: bool, force: bool,
           remote_only: bool, all_: bool, contains: str | None, show_current: bool, as_json: bool) -> None:
    """List, fork, delete or rename threads.

    \b
    qvc branch [-v] [-r|-a]         list threads (* marks the current one); -r the
                                    remote ones (REMOTE/THREAD), -a both
    qvc branch --contains CHECKPOINT
                                    the threads whose line holds CHECKPOINT
    qvc branch --show-current       the current thread's name
    qvc branch NEW [CHECKPOINT]     fork a new thread (default: from HEAD); from a
                                    run's checkpoint (RUN@N), a new run NEW
    qvc branch -f THREAD CHECKPOINT move THREAD to its CHECKPOINT (as `qvc reset`;
                                    the line left behind is kept), or fork it if new
    qvc branch -d THREAD...         delete; refuses a thread not fully merged (its head
                                    on no other thread's line nor HEAD's) or with lines
                                    kept by time travel (use -D)
    qvc branch -D THREAD...         delete anyway (never the current thread: check out
                                    another first, as git refuses too)
    qvc branch -m [OLD] NEW         rename (unlike git, its checkpoints get new commit
                                    SHAs: each commit records its thread's name)

    A NEW name follows git's branch name rules (`git check-ref-format --branch`); threads
    that programs wrote may have any id, and are shown quoted when they hold control characters.

    \b
    Example:
      qvc branch retry-1 run-7~3
      qvc checkout retry-1 && qvc branch -D run-7
    """
    listing = remote_only or all_ or contains is not None
    if sum((delete or force_delete, move, listing, show_current)) > 1:
        raise click.UsageError("choose one of -d/-D, -m, --show-current and listing (-r, -a, --contains)")
    if (listing or show_current) and names:
        raise click.UsageError("-r, -a, --contains and --show-current take no thread names")
    if force and (move or listing or show_current):
        raise click.UsageError("-f goes with -d or NEW [CHECKPOINT]")
    store = session().store(write=bool(delete or force_delete or move or names))
    if show_current:
        head = store.current()
        if head.thread is not None:
            out(qname(head.thread))
        return
    if delete or force_delete:
        if not names:
            raise click.UsageError("name the thread(s) to delete")
        delete_threads(store, names, force_delete or force)
        return
    if move:
        if len(names) not in (1, 2):
            raise click.UsageError("usage: qvc branch -m [OLD] NEW")
        current = current_head(store) if len(names) == 2 else store.current()
        old, new = (current.thread, names[0]) if len(names) == 1 else names
        if old is None:
            raise InvalidInputError("HEAD is detached: name the thread to rename")
        if current is not None and current.thread == old:
            store.check_head_movable()  # (HEAD would be left on the old name)
        copied = store.rename_thread(old, new_thread_name(new))
        if current is not None and current.thread == old:
            store.checkout(new)
        out(f"Renamed thread {old!r} to {new!r}")
        if copied:
            out(f"note: unlike git, its {copied} checkpoint(s) got new commit SHAs (each commit records its "
                f"thread's name; checkpoint ids stay); the old commits stay in `qvc reflog {qname(new)}` "
                "until `qvc gc --prune`")
        return
    if names:
        if len(names) > 2:
            raise click.UsageError("usage: qvc branch NEW [CHECKPOINT]")
        rev = revision(store, names[1] if len(names) == 2 else None)
        if force and store.head(names[0]) is not None:
            return move_thread(store, names[0], rev, as_json)
        # named as a run's (RUN, RUN@N): a run, as `qvc timeline NEW` reads it; else a thread
        run = fork_run(store, rev.commit, names[0]) if len(names) == 2 and run_named(store, names[1]) else None
        if run is not None:
            from qvc.runs import thread_of  # deferred: start-up speed

            if as_json:
                emit_json({"run": run.run_id, "thread": thread_of(run.session_id, run.run_id),
                           "id": run.checkpoint_id, "from": store.commit_info(rev.commit).checkpoint_id})
            else:
                out(f"Forked run {run.run_id!r} from {run.forked_from_run_id}@{run.forked_from_message_index} "
                    f"(thread {qname(thread_of(run.session_id, run.run_id))}, {run.status.value})")
            return
        made = fork(store, rev, names[0])
        source = store.commit_info(rev.commit).checkpoint_id
        if as_json:
            emit_json({"thread": made.thread_id, "id": made.checkpoint_id, "from": source})
        else:
            out(f"Forked thread {made.thread_id!r} from {short(source)} "
                f"(new checkpoint {short(made.checkpoint_id)})")
        return
    within = revision(store, contains).commit if contains is not None else None
    list_threads(store, verbose or as_json, as_json, local=not remote_only, remote=remote_only or all_,
                 contains=within)


def move_thread(store, thread: str, rev, as_json: bool) -> None:
    """``qvc branch -f THREAD CHECKPOINT`` on an existing thread: time travel to a checkpoint of its
    own (git's ``branch -f`` moves a branch anywhere; a qvc checkpoint records its thread, so
    another thread's checkpoint is refused: fork it). The current thread is refused, as git does."""
    head = current_head(store)
    if head is not None and head.thread == thread:
        raise InvalidInputError(f"cannot force update the current thread {thread!r}: use `qvc reset`")
    done = store.reset(thread, rev.commit)
    if as_json:
        emit_json({"thread": thread, "id": done.checkpoint_id, "commit": store.head(thread)})
    else:
        out(f"Moved thread {qname(thread)} to {short(done.checkpoint_id)} (the line left behind is kept)")


def delete_threads(store, names: tuple[str, ...], force: bool) -> None:
    """``qvc branch -d/-D``: check every thread first (unless ``force``), then delete them all."""
    from qvc.readers.views import kept_lines  # deferred: start-up speed

    head = current_head(store)
    current = head.thread if head is not None else None
    for name in names:
        if store.head(name) is None:
            why = dict(store.damaged_threads()).get(name)  # a file under refs/heads/ that holds no ref
            if why is not None:
                raise CorruptionError(f"thread {name!r} is damaged: {why}")
            raise UnknownThreadError(f"thread {name!r} not found")
        if name == current:
            raise InvalidInputError(f"cannot delete the current thread {name!r}: `qvc checkout` another first")
        if not force:
            if store.damage(store.head(name)) is not None:
                raise CorruptionError(f"thread {name!r} is damaged ({store.damage(store.head(name))}); "
                                      "use -D to delete it")
            kept = kept_lines(store, name)
            if kept:
                raise InvalidInputError(f"thread {name!r} has {len(kept)} line(s) kept by time travel that would be "
                                        "deleted too (see `qvc log --all`); use -D to delete anyway")
            if not merged(store, store.head(name), head, set(names)):
                raise InvalidInputError(
                    f"thread {name!r} is not fully merged: its {own_checkpoints(store, name)} checkpoint(s) are on "
                    f"no other thread's line nor HEAD's; if you are sure, `qvc branch -D {qname(name)}`")
    for name in names:
        tip = store.head(name)
        was = short(store.commit_info(tip).checkpoint_id) if store.damage(tip) is None else f"{tip[:12]}, damaged"
        store.delete_thread(name)
        out(f"Deleted thread {qname(name)} (was {was}; data stays until `qvc gc --prune`)")


def merged(store, tip: str, head: Head | None, leaving: set[str]) -> bool:
    """What ``git branch -d`` asks of a branch, in qvc's terms: whether the checkpoint commit ``tip``
    is on HEAD's line or on the line of a thread not in ``leaving`` (it is that commit or one of its
    ancestors). Threads never merge, so a thread with checkpoints of its own is merged only when
    another thread was forked from its head, or HEAD is detached at or after it."""
    tips = [head.commit] if head is not None and head.commit else []
    tips += [other for thread, other in store.thread_heads() if thread not in leaving]
    for other in dict.fromkeys(tips):
        try:
            if store.descends(other, tip):
                return True
        except CorruptionError:  # a damaged thread keeps nothing
            continue
    return False


def own_checkpoints(store, thread: str) -> int:
    """How many checkpoints on the line of ``thread``'s head are its own (back to where it was forked)."""
    count = 0
    for info in store.first_parents(store.head(thread)):
        if info.thread_id != thread:
            break
        count += 1
    return count


def list_threads(store, verbose: bool, as_json: bool, *, local: bool = True, remote: bool = False,
                 contains: str | None = None) -> None:
    """``qvc branch [-v] [-r|-a] [--contains C] [--json]``: the threads (``local``), the remote
    threads (``remote``, named as git names remote-tracking branches: ``REMOTE/THREAD`` alone,
    ``remotes/REMOTE/THREAD`` beside the local ones), only those whose line holds ``contains``."""
    from qvc.readers.views import thread_json  # deferred: start-up speed

    head = current_head(store)
    current = head.thread if head is not None else None
    heads = store.thread_heads() if local else []
    others = remote_heads(store, "remotes/" if local else "") if remote else []
    if contains is not None:
        heads = [(t, tip) for t, tip in heads if holds(store, tip, contains)]
        others = [(t, tip) for t, tip in others if holds(store, tip, contains)]
    if not verbose:  # names only: nothing to read per thread
        rows = [{"thread": thread, "current": thread == current, "head": tip} for thread, tip in heads]
        rows += [{"thread": name, "current": False, "head": tip, "remote": True} for name, tip in others]
    else:
        rows = []
        for thread, tip in heads:
            try:
                rows.append(thread_json(store, thread, thread == current, tip=tip))
            except CorruptionError as exc:  # one damaged thread: the others are listed all the same
                warn(f"thread {thread!r} is damaged: {exc}; {OBJECTS_REPAIR}, else `qvc branch -D` removes it")
        for name, tip in others:
            try:
                rows.append(thread_json(store, name, False, tip=tip) | {"remote": True})
            except CorruptionError as exc:
                warn(f"remote thread {name!r} is damaged: {exc} (see `qvc fsck`)")
    warn_damaged(store, current)
    if as_json:
        emit_json(rows)
        return
    width = max((len(qname(r["thread"])) for r in rows), default=0)
    lines = []
    for r in rows:
        mark = "*" if r["current"] else " "
        name = style(qname(r["thread"]).ljust(width), fg="green") if r["current"] else qname(r["thread"]).ljust(width)
        if not verbose:
            lines.append(f"{mark} {style(qname(r['thread']), fg='green') if r['current'] else qname(r['thread'])}")
            continue
        status = f" [{r['status']}]" if r["status"] else ""
        lines.append(f"{mark} {name}  {style(short(r['head_id']), fg='yellow')} step {r['step']}{status} · "
                     f"{r['checkpoints']} checkpoint(s) · updated {ago(r['timestamp'])}")
    page(lines)


def remote_heads(store, prefix: str) -> list[tuple[str, str]]:
    """``(name, head)`` of every remote thread, as last fetched: ``prefix`` + ``REMOTE/THREAD``."""
    from qvc.remotes import remotes  # deferred: start-up speed
    from qvc.store.refnames import REMOTES

    found = []
    for r in remotes(store):
        for ref, tip in store.repository.refs(f"{REMOTES}{r.name}/"):
            thread = store.thread_of_ref("refs/heads/" + ref[len(REMOTES) + len(r.name) + 1:], tip)
            found.append((f"{prefix}{r.name}/{thread}", tip))
    return found


def holds(store, tip: str, commit: str) -> bool:
    """Whether the line ending at ``tip`` holds checkpoint commit ``commit`` (git's ``--contains``)."""
    try:
        return store.descends(tip, commit)
    except CorruptionError:  # a damaged line holds nothing
        return False


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("-b", "new", metavar="NEW", help="Fork a new thread NEW at the checkpoint and switch to it.")
@click.option("--orphan", metavar="NEW",
              help="Make HEAD the new thread NEW, unborn: its first checkpoint creates it (git's --orphan).")
@click.option("--to", "to", metavar="DIR", type=click.Path(file_okay=False),
              help="Write the checkpoint's state to DIR as JSON files (HEAD does not move).")
@click.option("-f", "--force", is_flag=True,
              help="With --to: overwrite field files edited in DIR (files qvc did not write are never removed).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def checkout(name: str | None, new: str | None, to: str | None, force: bool, as_json: bool,
             orphan: str | None = None) -> None:
    """Switch threads, detach at a checkpoint, fork-and-switch, or export a state to files.

    \b
    qvc checkout THREAD               make THREAD the current thread (also repairs a
                                      damaged HEAD)
    qvc checkout -                    back to the thread (or checkpoint) HEAD was on
                                      before the last checkout
    qvc checkout CHECKPOINT           detach HEAD at a checkpoint
    qvc checkout -b NEW [CHECKPOINT]  fork NEW from it (default HEAD) and switch; on an
                                      unborn HEAD (no checkpoint yet), as --orphan
    qvc checkout --orphan NEW         make HEAD the new thread NEW, unborn: its first
                                      checkpoint creates it
    qvc checkout [CHECKPOINT] --to DIR
                                      one JSON file per field, to edit and `qvc commit DIR`;
                                      refuses to overwrite edits made there (--force does)

    \b
    Example:
      qvc checkout run-7~2 --to fix/ && $EDITOR fix/scratchpad.json && qvc commit fix/ -m "fix plan"
      qvc checkout run-7 --to fix/ --force    # discard the edits made in fix/
    """
    from qvc.store.revisions import thread_named  # deferred: start-up speed

    if orphan is not None and (new is not None or to is not None or name is not None):
        raise click.UsageError("--orphan NEW takes no CHECKPOINT, -b or --to")
    store = session().store(write=to is None)
    if to is not None:
        if new is not None:
            raise click.UsageError("--to and -b do not go together")
        checkout_to(store, name, to, as_json, force)
        return
    if force:
        raise click.UsageError("--force goes with --to DIR")
    try:
        before = store.current()
    except CorruptionError:
        before = None  # a garbled HEAD: any checkout below writes it anew
    repaired = " (HEAD was damaged; it is repaired)" if before is None else ""
    if name == "-" and new is None:
        previous = store.previous_checkout()
        if previous is None:
            raise InvalidInputError("no previous thread or checkpoint: HEAD has not moved yet")
        if previous.thread is not None and previous.commit is None:
            raise UnknownThreadError(f"the previous thread {previous.thread!r} has no checkpoints (deleted or renamed)")
        if previous.thread is not None:
            head = store.checkout(previous.thread)
            message = f"Switched to thread {previous.thread!r}"
        else:
            head = store.checkout(commit=previous.commit)
            message = f"HEAD is now at {short(store.commit_info(previous.commit).checkpoint_id)} (detached)"
    elif orphan is not None or new is not None and name is None and before is not None \
            and before.thread is not None and before.commit is None:
        # --orphan, or -b on an unborn HEAD (a new repository), as git's: HEAD names a thread yet to be
        head = unborn(store, orphan if orphan is not None else new)
        message = f"Switched to a new thread {head.thread!r} (unborn: its first checkpoint creates it)"
    elif new is not None:
        rev = revision(store, name)
        store.check_head_movable()  # (a fork that then cannot become HEAD would stay behind)
        made = fork(store, rev, new)
        head = store.checkout(new)
        source = store.commit_info(rev.commit).checkpoint_id  # the checkpoint forked from, as `qvc branch` says
        message = (f"Switched to a new thread {new!r} (forked from {short(source)}, "
                   f"new checkpoint {short(made.checkpoint_id)})")
    elif name is None:
        raise click.UsageError("name a thread or checkpoint (or use -b NEW, --orphan NEW, --to DIR)")
    elif name == "HEAD" and before is not None and before.thread is not None:
        head = before
        message = f"Already on {head.thread!r}"
    elif thread_named(store, name) is not None and name != "HEAD":
        head = store.checkout(name)
        message = f"Switched to thread {name!r}"
    else:
        try:
            rev = revision(store, name)
        except UnknownCheckpointError:  # as git's "pathspec 'x' did not match": no thread is made by a typo
            if new_name_problem(name) is not None:
                raise
            raise UnknownCheckpointError(f"no thread or checkpoint {shown(name)} (a new thread: "
                                         f"`qvc checkout -b {name}` forks HEAD, `qvc checkout --orphan {name}` "
                                         f"starts it with no checkpoint)") from None
        head = store.checkout(commit=rev.commit)
        message = f"HEAD is now at {short(store.commit_info(rev.commit).checkpoint_id)} (detached)"
    if as_json:
        emit_json({"thread": head.thread, "head": head.commit, "detached": head.detached})
    else:
        out(message + repaired)


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.argument("start", required=False, shell_complete=complete_names)
@click.option("-c", "--create", "create", is_flag=True, help="Fork a new thread NAME at START (default HEAD).")
@click.option("-d", "--detach", is_flag=True, help="Detach HEAD at the checkpoint NAME.")
@click.option("--orphan", is_flag=True, help="Make HEAD the new thread NAME, unborn: its first checkpoint creates it.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def switch(ctx: click.Context, name: str | None, start: str | None, create: bool, detach: bool,
           orphan: bool, as_json: bool) -> None:
    """Switch to a thread, as `git switch` does (`qvc checkout` does more).

    \b
    qvc switch THREAD          make THREAD the current thread; a thread only one remote
                               has (REMOTE/THREAD, fetched) is forked locally first
    qvc switch -               back to where HEAD was before the last checkout
    qvc switch -c NEW [START]  fork NEW from START (default HEAD) and switch to it
    qvc switch --detach CHECKPOINT
                               detach HEAD at a checkpoint
    qvc switch --orphan NEW    make HEAD the new thread NEW, unborn (its first
                               checkpoint creates it)

    \b
    Example:
      qvc switch -c retry run-7~3
    """
    from qvc.store.revisions import thread_named  # deferred: start-up speed

    if name is None:
        raise click.UsageError("name a thread (or -c NEW, --detach CHECKPOINT)")
    if sum((create, detach, orphan)) > 1:
        raise click.UsageError("choose one of -c, --detach and --orphan")
    if orphan:
        if start is not None:
            raise click.UsageError("usage: qvc switch --orphan NEW")
        return ctx.invoke(checkout, orphan=name, as_json=as_json)
    if start is not None and not create and not detach:
        raise click.UsageError("START goes with -c (`qvc switch -c NEW START`)")
    if create:
        return ctx.invoke(checkout, name=start, new=name, as_json=as_json)
    if detach:
        if start is not None:
            raise click.UsageError("usage: qvc switch --detach CHECKPOINT")
        store = session().store(write=True)  # a thread's name detaches at its head, as in git
        return ctx.invoke(checkout, name=revision(store, name).commit, as_json=as_json)
    if name == "-":
        return ctx.invoke(checkout, name=name, as_json=as_json)
    store = session().store(write=True)
    if thread_named(store, name) is None:
        tracked = [remote for remote, tip in remote_heads(store, "") if remote.split("/", 1)[1] == name]
        if len(tracked) != 1:
            raise UnknownThreadError(f"no thread {name!r}" + (
                f" (remote threads {', '.join(tracked)}: `qvc switch -c {name} REMOTE/{name}`)" if tracked else
                " (a checkpoint: `qvc switch --detach`; a new thread: `qvc switch -c`)"))
        return ctx.invoke(checkout, name=tracked[0], new=name, as_json=as_json)
    return ctx.invoke(checkout, name=name, as_json=as_json)


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("--soft", "mode", flag_value="soft", help="Move the current thread's head only.")
@click.option("--mixed", "mode", flag_value="mixed", help="The same as --soft (the default; qvc has no index).")
@click.option("--hard", "mode", flag_value="hard",
              help="Move the head and, with --to DIR, write its state over the checkout directory DIR.")
@click.option("--to", "to", metavar="DIR", type=click.Path(file_okay=False),
              help="With --hard: the checkout directory to reset (edits there are discarded).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def reset(name: str | None, mode: str | None, to: str | None, as_json: bool) -> None:
    """Time-travel the current thread to a checkpoint (default HEAD); the line left behind is kept.

    Undo with `qvc reset THREAD@{1}` (see `qvc reflog`); that works when the thread's head
    is damaged too. qvc has no index and no working tree of HEAD: --soft, --mixed (the
    default) and --hard all move the head alone; --hard --to DIR also rewrites the checkout
    directory DIR (`qvc checkout --to`) with the new head's state, discarding edits made there.

    \b
    Example:
      qvc reset HEAD~3
      qvc reset --hard run-7~1 --to fix/
    """
    from qvc.readers.views import is_kept_line  # deferred: start-up speed

    if to is not None and mode != "hard":
        raise click.UsageError("--to DIR goes with --hard")
    store = session().store(write=True)
    try:
        head = store.current()
    except DamagedRefError as exc:  # its ref file holds no ref: the reset sets it aside and puts the ref back
        head = Head(store.ref_thread(exc.ref), None)
    if head.thread is None:
        raise InvalidInputError("HEAD is detached: check out a thread to reset it")
    rev = revision(store, name)
    broken = head.commit is not None and store.damage(head.commit) is not None
    damaged_ref = head.commit is None
    done = store.reset(head.thread, rev.commit)
    if damaged_ref:  # the head its reflog put back, which the reset then moved from (its newest entry)
        moved = store.reflog(head.thread)[0]
        head = Head(head.thread, moved.old if moved.new == store.head(head.thread) else None)
    info = store.commit_info(store.head(head.thread))
    kept = (head.commit is not None and not broken and head.commit != info.hex
            and is_kept_line(store, head.thread, head.commit))
    wrote = None
    if to is not None:
        from qvc.readers.workdir import checkout_to_directory  # deferred: start-up speed

        wrote = checkout_to_directory(store, info.hex, to, force=True)
    if as_json:
        emit_json({"thread": head.thread, "id": done.checkpoint_id, "commit": info.hex, "step": info.step}
                  | ({"directory": wrote.directory, "files": wrote.files, "kept": wrote.kept}
                     if wrote is not None else {}))
        return
    out(f"HEAD is now at {short(info.checkpoint_id)} (step {info.step}) on {qname(head.thread)}"
        + ("; the previous line is kept (`qvc log --all`)" if kept else "")
        + (f"; the damaged head {head.commit[:12]} is left behind (its SHA stays in `qvc reflog`)"
           if broken and head.commit != info.hex else ""))
    if wrote is not None:
        out(f"Wrote {len(wrote.files)} field(s) to {to}, discarding the edits made there")
        kept_note(wrote.kept, to)
    elif mode == "hard":
        out("note: qvc has no working tree: --hard moved the head only (add --to DIR to reset a checkout "
            "directory too)")


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
    page([f"{style((e.new or '0' * 7)[:7], fg='yellow')} {qname(thread)}@{{{i}}}: {e.message} ({ago(e.time)})"
          for i, e in enumerate(entries)])
