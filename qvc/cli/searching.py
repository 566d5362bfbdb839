"""Searching history (:mod:`qvc.readers.bisect`): ``qvc bisect run``."""

from __future__ import annotations

import sys

import click

from qvc.cli.app import cli, revision, session
from qvc.cli.history import PathsAfterDashes
from qvc.cli.output import emit_json, out, short, style


class CommandAfterDashes(PathsAfterDashes):
    """The command to run comes after ``--``."""

    after_dashes_metavar = "CMD [ARG...]"


@cli.group()
def bisect() -> None:
    """Find the first bad checkpoint by binary search (git bisect).

    \b
    Example:
      qvc bisect run --good run-7~40 --bad run-7 -- python check.py
    """


@bisect.command("run", cls=CommandAfterDashes)
@click.option("--good", "good", required=True, metavar="REV", help="A checkpoint known to be good.")
@click.option("--bad", "bad", required=True, metavar="REV", help="A later checkpoint on its line known to be bad.")
@click.option("--json", "as_json", is_flag=True, help="The result as JSON (the command's output goes to stderr).")
def run(good: str, bad: str, as_json: bool) -> int | None:
    """Run CMD (after --) on checkpoints between --good and --bad until the first bad one is found.

    Each run has the checkpoint's state in $QVC_STATE_DIR (one JSON file per field, as
    `checkout --to` writes it), and $QVC_CHECKPOINT, $QVC_COMMIT and $QVC_REPO set. CMD's exit
    status, as for git bisect run: 0 good, 125 skip, 1-127 bad, anything else aborts. About
    log2(n) runs for n checkpoints. Exit 1 when skipped checkpoints leave it undecided.

    \b
    Example:
      qvc bisect run --good run-7~40 --bad run-7 -- python check.py
      qvc bisect run --good r-7@4 --bad r-7 --json -- sh -c 'grep -q ok "$QVC_STATE_DIR"/status.json'
    """
    from qvc.readers.bisect import bisect as search  # deferred: start-up speed
    from qvc.readers.bisect import run_test

    argv = click.get_current_context().meta.get("after_dashes", [])
    if not argv:
        raise click.UsageError("name the command to run after --")
    store = session().store()
    good_commit, bad_commit = revision(store, good).commit, revision(store, bad).commit
    stdout = sys.stderr if as_json else None  # --json: only the result on stdout

    def said(t, left: int) -> None:
        if not as_json:
            out(f"{style(t.verdict, fg='green' if t.verdict == 'good' else 'red' if t.verdict == 'bad' else 'cyan')}"
                f" {short(t.checkpoint_id)} step {t.step} {t.commit[:7]} (exit {t.status}); "
                f"{left} checkpoint{'s' if left != 1 else ''} in question")

    def test(commit: str) -> int:
        sys.stdout.flush()  # our lines before the command's, also into a pipe
        return run_test(store, commit, argv, stdout=stdout)

    found = search(store, good_commit, bad_commit, test, said)
    if as_json:
        emit_json(found.to_json())
    elif found.first_bad is not None:
        b = found.first_bad
        out(f"first bad checkpoint: {style(b.checkpoint_id, fg='yellow')} (commit {b.commit}, thread {b.thread}, "
            f"step {b.step}) after {len(found.tested)} run{'s' if len(found.tested) != 1 else ''}")
    else:
        out("skipped checkpoints leave it undecided; the first bad one is one of: "
            + ", ".join(f"{short(c.checkpoint_id)} (step {c.step})" for c in found.candidates))
    return None if found.first_bad is not None else 1
