"""Working directories (:mod:`qvc.readers.workdir`, :mod:`qvc.edit.workdir`): ``qvc checkout --to DIR``
(through :func:`checkout_to`, which ``qvc checkout`` calls) and ``qvc commit DIR``."""

from __future__ import annotations

import click

from qvc.cli.app import cli, revision, session
from qvc.cli.output import emit_json, out, qname, short, warn


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
        emit_json({"directory": done.directory, "id": done.id, "thread": done.thread, "files": done.files})
    else:
        out(f"Wrote {len(done.files)} field(s) of checkpoint {short(done.id)} (thread {qname(done.thread)}, "
            f"step {done.step}) to {to}; edit them, then `qvc commit {to}`")


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
    from qvc.edit.workdir import commit_directory  # deferred: start-up speed

    done = commit_directory(session().store(write=True), directory, message)
    if as_json:
        emit_json({"thread": done.thread, "id": done.id, "commit": done.commit, "step": done.step,
                   "changed": done.changed, "time_travel": done.time_travel})
        return
    out(f"[{qname(done.thread)} {short(done.id)}] step {done.step} · update · {len(done.changed)} field(s) changed"
        + (f": {', '.join(done.changed)}" if done.changed else ""))
    if done.time_travel:
        out("note: the thread had moved on since the state was checked out; the newer checkpoints are "
            "kept as a superseded line (`qvc log --all`)")

