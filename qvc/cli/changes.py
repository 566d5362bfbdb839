"""``qvc diff``: which fields changed between two checkpoints, and how."""

from __future__ import annotations

import click

from qvc.cli.app import cli, complete_names, revision, session
from qvc.cli.output import emit_json, out, page, value_width


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
      qvc diff RUN@3 RUN@5      # a run between two of its checkpoints (message indexes)
    """
    # deferred: start-up speed
    from qvc.inspect.statediff import format_diff, format_stat, to_json
    from qvc.inspect.views import diff_commits

    store = session().store()
    first = _commit(store, a)
    diffs = diff_commits(store, None, first) if b is None else diff_commits(store, first, _commit(store, b))
    if as_json:
        emit_json(to_json(diffs))
    elif stat:
        out(format_stat(diffs))
    else:
        text = format_diff(diffs, color=session().color, full=full, width=value_width())
        page(text.split("\n") if text else [])


def _commit(store, name: str) -> str:
    """The commit of a revision, else of a run reference (``RUN``, ``RUN@INDEX``, ``RUN@CHECKPOINT``)."""
    from qvc.cli.runs import run_commit  # deferred: start-up speed
    from qvc.errors import NotFoundError

    try:
        return revision(store, name).commit
    except NotFoundError:
        found = run_commit(store, name)
        if found is None:
            raise
        return found
