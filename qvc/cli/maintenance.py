"""Maintenance: ``qvc gc`` (pack, and purge deleted data), ``qvc fsck`` (verify) and ``qvc cat-blob``
(a blob file as JSON, for git's textconv)."""

from __future__ import annotations

import time

import click

from qvc.cli.app import EXIT_CORRUPT, cli, session
from qvc.cli.output import emit_json, out
from qvc.errors import QvcError


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
    from qvc.plumbing.maintenance import disk_usage  # deferred: start-up speed

    store = session().store(write=True)
    before = disk_usage(store.path)
    t0 = time.monotonic()
    store.purge() if prune else store.gc()
    after = disk_usage(store.path)
    out(f"{'Purged and packed' if prune else 'Packed'} {store.path}: {before / 2**20:.1f} MiB -> "
        f"{after / 2**20:.1f} MiB in {time.monotonic() - t0:.1f} s")


@cli.command()
@click.option("--repair", is_flag=True,
              help="First repair ref files that hold no ref: move each aside, restore the ref from its reflog.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def fsck(repair: bool, as_json: bool) -> None:
    """Verify the repository: git's object checks, every ref, every checkpoint and pending write.

    Exits with status 5 when it finds problems, each naming where it is: the thread of a
    broken ref; the thread, checkpoint and field of a damaged state. A reflog entry naming a
    commit that is gone (what repairing a damaged head with `qvc reset THREAD@{1}` leaves) is
    a warning in an otherwise healthy repository (exit 0): `qvc gc --prune` drops it.

    --repair first repairs every ref whose file holds no ref (garbage text, a file another
    program left under refs/): the file is moved aside into qvc/quarantine/ (nothing is
    deleted) and the ref set back to the newest commit its reflog names that is whole (a ref
    without one stays removed), in one line saying what it did; then it verifies.

    \b
    Example:
      qvc fsck && echo healthy
      qvc fsck --repair                        # a thread whose ref file is garbage
      qvc fetch origin && qvc gc                # objects lost (a truncated pack): from a remote
      qvc fsck || qvc branch -D broken-thread   # a thread whose objects no remote has
    """
    from qvc.readers.fsck import fsck as check  # deferred: start-up speed

    store = session().store(write=repair)
    if repair:
        done = store.repair_refs()
        if done:
            click.echo(f"repaired: {done.summary()}", err=as_json)
    report = check(store)
    if as_json:
        emit_json(report.to_json())
    else:
        for problem in report.problems:
            click.echo(f"error: {problem}", err=True)
        for warning in report.warnings:
            click.echo(f"warning: {warning}", err=True)
        warned = f" ({len(report.warnings)} warning(s))" if report.warnings else ""
        out(f"checked {report.refs} ref(s), {report.checkpoints} checkpoint(s), "
            f"{report.pending_writes} set(s) of pending writes: "
            + (f"{len(report.problems)} problem(s)" if report else "ok" + warned))
    if report:
        raise SystemExit(EXIT_CORRUPT)


@cli.command("cat-blob")
@click.argument("file", type=click.File("rb"))
def cat_blob(file) -> None:  # noqa: ANN001 - click's lazy file
    """Print a qvc blob file (a state field, a chunk, .qvc) as tagged JSON; FILE - reads stdin.

    Made for git's textconv, so plain git shows qvc's blobs as JSON (docs/format.md):

    \b
    Example:
      git --git-dir runs.qvc config diff.qvc.textconv "qvc cat-blob"
      git --git-dir runs.qvc log -p
    """
    from qvc.codec.serde import loads  # deferred: start-up speed
    from qvc.codec.tagged import dumps_tagged

    data = file.read()
    try:
        value = loads(data, "blob")
    except QvcError:  # not a qvc value (a blob of another tool): say so rather than print bytes
        out(f"(not a qvc value: {len(data)} bytes)")
        return
    click.echo(dumps_tagged(value), nl=False)
