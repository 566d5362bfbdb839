"""``qvc bisect run``: the first bad checkpoint on the line from a good one to a bad one, found by
binary search, as ``git bisect run`` finds the first bad commit.

The line is the bad checkpoint's first-parent line back to the good one (crossing into a source
thread at a fork), which must be on it. Each tested checkpoint's verdict comes from a test:
:func:`bisect` takes any callable, :func:`run_test` is the one the command line uses (a command
run with the checkpoint's state checked out, as ``qvc checkout --to`` writes it). Exit statuses
follow ``git bisect run``: 0 good, 125 skip (the checkpoint cannot be tested: a neighbour is
tried instead), 1 to 127 bad; anything else (128 and up, a signal) aborts the search. About
log2(n) checkpoints are tested for a line of n.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from qvc.errors import InvalidInputError, QvcError
from qvc.plumbing.launcher import run_user_command
from qvc.readers.workdir import checkout_to_directory

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore

GOOD, SKIP = 0, 125


@dataclass(frozen=True)
class Tested:
    """One test: the checkpoint, the test's exit status and the verdict (good, bad or skip)."""

    checkpoint_id: str
    commit: str
    step: int | None
    status: int
    verdict: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.checkpoint_id, "commit": self.commit, "step": self.step, "exit": self.status,
                "verdict": self.verdict}


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint named in a result."""

    checkpoint_id: str
    commit: str
    step: int | None
    thread: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.checkpoint_id, "commit": self.commit, "step": self.step}


@dataclass(frozen=True)
class BisectResult:
    """What :func:`bisect` found: ``first_bad``, or ``None`` when skipped checkpoints leave
    several ``candidates`` (oldest first; the first bad one is among them)."""

    first_bad: Checkpointed | None
    candidates: list[Checkpointed]
    tested: list[Tested] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The stable ``qvc bisect run --json`` form."""
        out: dict[str, Any] = {"first_bad": self.first_bad.to_json() if self.first_bad else None,
                               "tested": len(self.tested), "steps": [t.to_json() for t in self.tested]}
        if self.first_bad is None:
            out["candidates"] = [c.to_json() for c in self.candidates]
        return out


def verdict(status: int) -> str:
    """``good``, ``skip`` or ``bad`` for a test's exit status (git bisect run's rules); raises
    :class:`QvcError` for one that aborts the search (negative: killed by a signal, or >= 128)."""
    if status == GOOD:
        return "good"
    if status == SKIP:
        return "skip"
    if 1 <= status <= 127:
        return "bad"
    how = f"was killed by signal {-status}" if status < 0 else f"exited {status}"
    raise QvcError(f"bisect aborted: the test {how} (0 is good, 125 skip, 1-127 bad, anything else aborts)")


def bisect_line(store: GitCheckpointStore, good: str, bad: str) -> list[str]:
    """The commits after ``good`` up to ``bad``, oldest first. Raises :class:`InvalidInputError`
    when ``good`` is not on ``bad``'s first-parent line, or is ``bad``."""
    if good == bad:
        raise InvalidInputError("the good and the bad checkpoint are the same")
    line = []
    for info in store.first_parents(bad):
        if info.hex == good:
            return line[::-1]
        line.append(info.hex)
    raise InvalidInputError(f"the good checkpoint {good[:12]} is not on the bad one's line ({bad[:12]} and the "
                            "checkpoints before it)")


def bisect(store: GitCheckpointStore, good: str, bad: str, test: Callable[[str], int],
           on_tested: Callable[[Tested, int], None] | None = None) -> BisectResult:
    """Binary search for the first bad checkpoint after commit ``good`` up to commit ``bad``
    (both trusted, as git trusts them), calling ``test(commit)`` for each checkpoint it tries;
    its exit status gives the verdict (:func:`verdict`). ``on_tested(tested, left)`` is told
    each verdict and how many checkpoints are still in question. Raises
    :class:`InvalidInputError` (see :func:`bisect_line`) and :class:`QvcError` when a test
    aborts the search."""
    line = bisect_line(store, good, bad)
    lo, hi = 0, len(line) - 1  # the first bad one is in line[lo..hi]; line[hi] is known bad
    skipped: set[int] = set()
    tested: list[Tested] = []
    while lo < hi:
        mid = _pick(lo, hi, skipped)
        if mid is None:
            break
        info = store.commit_info(line[mid])
        status = test(line[mid])
        said = verdict(status)
        tested.append(Tested(info.checkpoint_id, info.hex, info.step, status, said))
        if said == "good":
            lo = mid + 1
        elif said == "bad":
            hi = mid
        else:
            skipped.add(mid)
        if on_tested is not None:
            on_tested(tested[-1], hi - lo + 1)
    named = [_named(store, c) for c in line[lo:hi + 1]]
    if lo == hi:
        return BisectResult(named[0], named, tested)
    return BisectResult(None, named, tested)


def _pick(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested index of ``lo..hi-1`` nearest the middle (``None``: all of them skipped)."""
    mid = (lo + hi) // 2
    for distance in range(hi - lo):
        for i in (mid - distance, mid + distance):
            if lo <= i < hi and i not in skipped:
                return i
    return None


def _named(store: GitCheckpointStore, commit: str) -> Checkpointed:
    info = store.commit_info(commit)
    return Checkpointed(info.checkpoint_id, commit, info.step, info.thread_id)


def run_test(store: GitCheckpointStore, commit: str, argv: Sequence[str], *, stdout: Any = None) -> int:
    """Run ``argv`` with checkpoint commit ``commit``'s state checked out in a fresh temporary
    directory (one JSON file per field, as :func:`qvc.readers.workdir.checkout_to_directory`
    writes it; removed afterwards), named by ``$QVC_STATE_DIR``, with ``$QVC_CHECKPOINT`` (the
    checkpoint id), ``$QVC_COMMIT`` and ``$QVC_REPO`` (the repository) set; returns its exit
    status (negative: the signal that killed it). ``stdout`` is where its output goes (default:
    ours). It is started by :func:`qvc.plumbing.launcher.run_user_command`, the one place a
    program the user names runs. Raises :class:`QvcError` when it cannot be started."""
    if not argv:
        raise InvalidInputError("no command to run (qvc bisect run ... -- CMD ...)")
    with tempfile.TemporaryDirectory(prefix="qvc-bisect-") as tmp:
        state = os.path.join(tmp, "state")
        done = checkout_to_directory(store, commit, state)
        env = dict(os.environ, QVC_STATE_DIR=state, QVC_CHECKPOINT=done.id, QVC_COMMIT=commit,
                   QVC_REPO=os.path.abspath(store.path))
        return run_user_command(argv, env=env, stdout=stdout)
