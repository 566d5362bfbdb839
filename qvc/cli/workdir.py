"""Working directories (:mod:`qvc.readers.workdir`, :mod:`qvc.edit.workdir`): ``qvc checkout --to DIR``
(through :func:`checkout_to`, which ``qvc checkout`` calls) and ``qvc commit DIR``."""

from __future__ import annotations

import click

from qvc.cli.app import cli, revision, session
from qvc.cli.output import emit_json, out, qname, short, warn
from qvc.errors import CheckpointConflictError, CorruptionError, InvalidInputError, QvcError


def checkout_to(store, name: str | None, to: str, as_json: bool, force: bool = False) -> None:
    """``qvc checkout [CHECKPOINT] --to DIR [--force]``: the checkpoint's state as files in ``to``;
    refuses to overwrite edited field files there unless ``force``."""
    from qvc.readers.workdir import checkout_to_directory  # deferred: start-up speed

    done = checkout_to_directory(store, revision(store, name).commit, to, force=force)
    for field, why in done.damaged.items():
        warn(f"field {field!r} is damaged and was not written: {why} (see `qvc fsck`; a commit from {to} "
             "drops it unless you add its file)")
    for note in done.notes:
        warn(note)
    if as_json:
        emit_json({"directory": done.directory, "id": done.id, "thread": done.thread, "files": done.files,
                   "notes": done.notes, "kept": done.kept})
    else:
        out(f"Wrote {len(done.files)} field(s) of checkpoint {short(done.id)} (thread {qname(done.thread)}, "
            f"step {done.step}) to {to}; edit them, then `qvc commit {to}`")
        kept_note(done.kept, to)


def kept_note(kept: list[str], to: str) -> None:
    """One line naming the ``*.json`` files a checkout left in ``to`` because qvc did not write them."""
    if kept:
        out(f"note: kept {len(kept)} file(s) qvc did not write in {to}: {', '.join(kept)} "
            f"(`qvc commit {to}` stores them as fields)")


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option("-m", "--message", default="", help="Why the state was edited (kept in the metadata).")
@click.option("-f", "--force", is_flag=True,
              help="Commit even if the thread moved on since DIR was checked out (its newer checkpoints are "
                   "kept as a superseded line), or its writer keeps its head in the thread's record.")
@click.option("--allow-empty", is_flag=True, help="Commit even when DIR holds the state it builds on, unchanged.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def commit(directory: str, message: str, force: bool, allow_empty: bool, as_json: bool) -> None:
    """Store an edited state (from `checkout --to DIR`) as a new checkpoint on the current thread.

    The new checkpoint's parent is the one DIR was written from when it is on the current
    thread (so editing an older checkpoint is time travel: the newer line is kept), else the
    current head. Its metadata has source "update".

    As git refuses a non-fast-forward push, a commit that would rewind checkpoints the thread
    gained after DIR was checked out (other writers' work) is refused, and nothing is written;
    --force commits anyway and keeps them as a superseded line. A DIR holding the state it
    builds on, unchanged, is "nothing to commit" unless --allow-empty.

    \b
    Example:
      qvc commit fix/ -m "drop the hallucinated tool result"
    """
    from qvc.edit.workdir import commit_directory  # deferred: start-up speed

    store = session().store(write=True)
    head = store.current()
    stale = check_directory(store, head, directory, force, allow_empty)
    # the head checked is the head swapped: another writer's checkpoint in between is refused, never rewound
    done = commit_directory(store, directory, message, expected_head=head.commit)
    if as_json:
        emit_json({"thread": done.thread, "id": done.id, "commit": done.commit, "step": done.step,
                   "changed": done.changed, "time_travel": done.time_travel})
        return
    out(f"[{qname(done.thread)} {short(done.id)}] step {done.step} · update · {len(done.changed)} field(s) changed"
        + (f": {', '.join(done.changed)}" if done.changed else ""))
    if done.time_travel and stale:
        out("note: --force: the checkpoints the thread gained since the state was checked out are kept as a "
            "superseded line (`qvc log --all`)")
    elif done.time_travel:
        out("note: the state was checked out from an older checkpoint: this is time travel, the newer "
            "checkpoints are kept as a superseded line (`qvc log --all`)")


def check_directory(store, head, directory: str, force: bool, allow_empty: bool) -> bool:
    """Refuse ``qvc commit DIR`` before anything is written, as git would: a commit that would rewind
    checkpoints the thread gained after DIR was checked out, and one on a thread whose writer keeps
    its head in the thread's record (unless ``force``, both), and one that stores the state it
    builds on unchanged (unless ``allow_empty``). ``head``: HEAD as the caller read it (the commit
    then swaps only that head). Returns whether the thread moved on since."""
    from qvc.readers.statefiles import local_changes, read_state  # deferred: start-up speed

    if head.thread is None or head.commit is None:
        return False  # detached (commit_directory says so) or a first checkpoint: nothing to rewind
    if not force and store.thread_record(head.thread) is not None:
        raise InvalidInputError(
            f"thread {head.thread!r} keeps its head in the record its writer stores beside it: its framework "
            f"reads the record, would not see this commit and would leave it behind at its next save; nothing "
            f"was stored (`qvc commit --force {directory}` stores it anyway)")
    state, meta = read_state(directory)
    base = meta.get("commit") if isinstance(meta.get("commit"), str) else None
    try:
        on_thread = base is not None and store.commit_info(base).thread_id == head.thread
    except CorruptionError:
        on_thread = False
    parent = base if on_thread else head.commit
    seen = meta.get("head") if isinstance(meta.get("head"), str) else base  # the head when DIR was written
    stale = parent != head.commit and seen != head.commit and not store.descends(parent, head.commit)
    if stale and not force:
        gained = sum(1 for _ in _gained(store, head.commit, parent))
        raise CheckpointConflictError(
            f"thread {head.thread!r} has moved on since {directory} was checked out: committing would rewind "
            f"{gained} checkpoint(s) written since (`qvc checkout {qname(head.thread)} --to {directory} --force` "
            f"starts from them; `qvc commit --force {directory}` keeps them as a superseded line)")
    if not allow_empty and (parent == base and not local_changes(directory) or store.same_state(parent, state)):
        raise QvcError(f"nothing to commit: {directory} holds the state of checkpoint "
                       f"{short(store.commit_info(parent).checkpoint_id)} unchanged (use --allow-empty)")
    return stale


def _gained(store, tip: str, parent: str):
    """The first-parent line from ``tip`` back to the first commit ``parent`` descends from."""
    for info in store.first_parents(tip):
        if store.descends(parent, info.hex):
            return
        yield info
