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
@click.option("--keep-last", type=click.IntRange(min=1), metavar="N",
              help="Keep the newest N checkpoints of each thread's line.")
@click.option("--max-age", metavar="AGE", help="Remove checkpoints older than AGE (30d, 12h, 2w, 90m, 45s).")
@click.option("--thread-ttl", metavar="AGE", help="Delete threads idle for longer than AGE.")
@click.option("--abandoned-after", metavar="AGE",
              help="Drop superseded lines, and delete forked threads, idle for longer than AGE.")
@click.option("--keep-first", is_flag=True, help="Keep each thread's first checkpoint too.")
@click.option("--no-retention", is_flag=True, help="Pack only; do not apply the configured retention policy.")
@click.option("-n", "--dry-run", is_flag=True,
              help="List what the policy would remove, per thread, and the bytes it would free; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (retention's report).")
def gc(prune: bool, keep_last: int | None, max_age: str | None, thread_ttl: str | None, abandoned_after: str | None,
       keep_first: bool, no_retention: bool, dry_run: bool, as_json: bool) -> None:
    """Pack objects and refs with git, applying the retention policy; --prune also purges deleted data.

    Waits for writers in every process (briefly) and never loses a checkpoint that any
    thread or superseded line still reaches, unless a retention policy removes it.

    The retention policy is the repository's (`qvc config retention.keepLast 50`,
    docs/retention.md) with the options given here winning over it. Each thread keeps its
    head, its tagged checkpoints and what the policy keeps, with their ids and states; what
    the policy removed is then purged, so the bytes leave the disk (as --prune: every reflog
    goes too; each removal is on the record, `qvc verify` explains it).

    \b
    Example:
      qvc gc --prune
      qvc gc --keep-last 50 --max-age 30d --thread-ttl 90d --dry-run
      qvc config retention.keepLast 50 && qvc gc
    """
    from qvc.plumbing.maintenance import disk_usage  # deferred: start-up speed
    from qvc.store.retention import Policy, parse_age

    policy = None
    if not no_retention:
        ages = {name: parse_age(value, f"--{name.replace('_', '-')}") if value is not None else None
                for name, value in (("max_age", max_age), ("thread_ttl", thread_ttl),
                                    ("abandoned_after", abandoned_after))}
        policy = Policy(keep_last=keep_last, keep_first=keep_first, **ages)
    elif keep_last is not None or keep_first or any((max_age, thread_ttl, abandoned_after)):
        raise click.UsageError("--no-retention takes no retention option")
    store = session().store(write=not dry_run)  # a dry run changes nothing: it reads, as `log` does
    t0 = time.monotonic()
    report = None if no_retention else store.retain(policy, dry_run=dry_run)
    if as_json:
        emit_json(report.as_json() if report is not None else {"dry_run": dry_run, "threads": [], "removed": 0})
    elif report is not None:
        _print_retention(report)
    if dry_run or (report is not None and report.threads):
        return  # retain() purged what it removed
    before = disk_usage(store.path)
    store.purge() if prune else store.gc()
    if not as_json:
        after = disk_usage(store.path)
        out(f"{'Purged and packed' if prune else 'Packed'} {store.path}: {_size(before)} -> {_size(after)} "
            f"in {time.monotonic() - t0:.1f} s")


def _size(n: int) -> str:
    if abs(n) >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if abs(n) >= 1024 else f"{n} bytes"


def _print_retention(report) -> None:
    """The report of :meth:`~qvc.store.git_store.GitCheckpointStore.retain`, a line per thread."""
    would = "would " if report.dry_run else ""
    for plan in report.threads:
        if plan.delete:
            what = f"{would}delete the thread, {len(plan.gone)} checkpoint(s): {plan.delete}"
        else:
            lines = f", {len(plan.lines)} superseded line(s)" if plan.lines else ""
            what = (f"{would}remove {len(plan.gone)} checkpoint(s){lines}, keep {plan.kept} "
                    f"({plan.policy.describe()})")
        freed = f", {_size(plan.bytes)}" if plan.bytes is not None else ""
        out(f"{plan.thread}: {what}{freed}")
    for thread, why in report.skipped:
        out(f"{thread}: {why}")
    if not report.threads:
        if report.examined or report.skipped:
            out(f"Retention: nothing to remove in {report.examined} thread(s)")
        elif report.dry_run:
            out("Retention: no policy (qvc config retention.keepLast N, or --keep-last N): nothing would be removed")
        return
    total = f"{report.removed} checkpoint(s) of {len(report.threads)} thread(s)"
    if report.dry_run:
        out(f"Would remove {total} and free about {_size(report.predicted or 0)}; nothing changed (dry run)")
    else:
        out(f"Removed {total}, then purged: history {_size(report.bytes_before)} -> {_size(report.bytes_after)}, "
            f"repository {_size(report.total_before)} -> {_size(report.total_after)} in {report.seconds:.1f} s")


@cli.command()
@click.option("--repair", is_flag=True,
              help="First repair ref files that hold no ref (move each aside, restore the ref from its reflog) "
                   "and a damaged staging database (move it aside).")
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
    without one stays removed), in one line saying what it did; a damaged staging database
    (qvc/staging.db) is moved aside there too, in one line saying what is lost; then it verifies.

    \b
    Example:
      qvc fsck && echo healthy
      qvc fsck --repair                        # a thread whose ref file is garbage
      qvc fetch --refetch origin && qvc gc      # objects lost (a truncated pack): from a remote
      qvc fsck || qvc branch -D broken-thread   # a thread whose objects no remote has
    """
    from qvc.readers.fsck import fsck as check  # deferred: start-up speed

    store = session().store(write=repair)
    if repair:
        aside = store.repair_staging()
        if aside is not None:
            click.echo(f"repaired: {aside}", err=as_json)
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
