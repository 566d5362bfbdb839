"""``qvc diff``: which fields changed between two checkpoints, and how."""

from __future__ import annotations

import click

from qvc.cli.app import cli, complete_names, revision, session
from qvc.cli.history import PathsAfterDashes
from qvc.cli.output import emit_json, out, page, value_width, warn


def revision_pair(store, a: str, b: str | None) -> tuple:
    """``A B`` as two revisions; ``A..B`` (one argument; ``A..`` and ``..B``: HEAD for the missing
    side) as git's ``diff A..B`` reads it, unless ``A..B`` names a checkpoint itself. ``(rev, None)``
    for one revision (compared with its parent)."""
    from qvc.errors import NotFoundError  # deferred: start-up speed

    if b is None and ".." in a and "..." not in a:
        try:
            return revision(store, a), None
        except NotFoundError:
            left, _, right = a.partition("..")
            return revision(store, left or "HEAD"), revision(store, right or "HEAD")
    return revision(store, a), None if b is None else revision(store, b)


@cli.command(cls=PathsAfterDashes)
@click.argument("a", shell_complete=complete_names)
@click.argument("b", required=False, shell_complete=complete_names)
@click.option("--stat", is_flag=True, help="Only counts per field.")
@click.option("--full", is_flag=True, help="Do not shorten values.")
@click.option("--json", "as_json", is_flag=True, help="Structured changes as JSON.")
@click.option("--raw", is_flag=True, help="The stored fields, not as their viewer shows them.")
def diff(a: str, b: str | None, stat: bool, full: bool, as_json: bool, raw: bool) -> None:
    """Show which fields changed between two checkpoints, and how.

    With one checkpoint, compares it with its parent; with two (A B, or A..B as in git), A to B.
    After --, field names: only those fields are compared. Values are shown as their writer's
    viewer shows them (LangGraph messages and runs as conversations: lists aligned by message
    id, a summary line first); --raw compares the stored fields.

    \b
    Example:
      qvc diff run-7            # the head against its parent
      qvc diff run-7~5 run-7 --stat
      qvc diff run-7~5..run-7 -- messages
      qvc diff RUN@3 RUN@5      # a run between two of its checkpoints (message indexes)
    """
    # deferred: start-up speed
    from qvc.readers.statediff import format_diff, format_stat, to_json
    from qvc.readers.views import diff_commits, people_diffs

    store = session().store()
    fields = click.get_current_context().meta.get("after_dashes", [])
    ra, rb = revision_pair(store, a, b)
    damaged: dict[str, str] = {}
    diffs = diff_commits(store, None, ra.commit, damaged, plain=as_json, raw=raw) if rb is None else \
        diff_commits(store, ra.commit, rb.commit, damaged, plain=as_json, raw=raw)
    if not as_json:  # as people read them: a run's storage records (`run`, `agno`) left out, as on the page
        shas = [ra.commit, rb.commit] if rb is not None else [ra.commit, store.commit_info(ra.commit).parent]
        diffs = people_diffs(store, diffs, shas, fields, raw=raw)
    if fields:
        diffs = [d for d in diffs if d.field in fields]
        damaged = {f: why for f, why in damaged.items() if f in fields}
    for field, why in damaged.items():  # the healthy fields are compared all the same
        warn(f"field {field!r} not compared: {why} (see `qvc fsck`)")
    if as_json:
        emit_json(to_json(diffs))
    elif stat:
        for line in format_stat(diffs).split("\n"):
            out(line)
    else:
        text = format_diff(diffs, color=session().color, full=full, width=value_width())
        page(text.split("\n") if text else [])
