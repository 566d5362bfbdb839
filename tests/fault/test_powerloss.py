"""Power loss, simulated from a real system-call record.

A scripted writer (tests/fault/workers/powerloss_writer.py: puts, pending writes, a fork, a reset, deletes)
runs under ``strace`` in each durability mode. :mod:`powerloss` rebuilds every file-system
operation it made on the repository and the states a power cut could leave at many points of
the run (un-synced data dropped or torn, un-synced directory operations kept as a prefix, see
its docstring). Each state is written to a directory and opened with qvc (recovery runs).
Then:

- ``git fsck --strict`` accepts it, and every checkpoint on every thread decodes;
- SYNC: the repository is exactly as the writer saw it after ``m`` of its operations (nothing
  half-done), ``m`` at least every acknowledged operation and at most those begun;
- ASYNC and EXIT: each thread is exactly as the writer saw it after some ``m`` between the
  operations made durable (ASYNC: acknowledged before the journal's last completed
  ``fdatasync``, which the flusher starts within ``max_lag`` of an acknowledgement; EXIT:
  acknowledged before the last ``flush()``) and those begun. The un-flushed operations' git
  files reach the disk in whatever order the file system picks, so threads need not agree on
  one ``m``.

``test_sync_put_ordering`` reads the SYNC trace directly and checks the order of the journal's
flushes against the ref moves (what qvc's design promises, see its docstring).

``QVC_POWERLOSS_STATES`` sets how many crash states per mode the slow variant (``-m slow``) checks,
``QVC_POWERLOSS_CI_STATES`` (12) how many the default run checks.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

HERE = Path(__file__).resolve().parent
for _where in (HERE, HERE / "workers"):
    if str(_where) not in sys.path:
        sys.path.insert(0, str(_where))

import powerloss  # noqa: E402
import powerloss_writer as pw  # noqa: E402
from helpers import child_env, fsck  # noqa: E402
from test_crash import slow_enabled  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402
from qvc.errors import QvcError  # noqa: E402

# .ci/run installs strace, so in CI (CI=true) the suite never skips for want of it.
pytestmark = [pytest.mark.heavy, pytest.mark.skipif(shutil.which("strace") is None and not os.environ.get("CI"),
                                reason="strace is not installed")]

MODES = ["sync", "async", "exit"]
# crash points per mode in the default run (each checked in several variants)
CI_STATES = int(os.environ.get("QVC_POWERLOSS_CI_STATES", "12"))
WINDOW_SLACK = 0.5  # scheduling slack on top of max_lag for the flusher to start a flush, under strace


class Run:
    """One traced run of the scripted writer: the trace, the views after each operation."""

    def __init__(self, tmp: Path, mode: str, *variant: str):
        self.mode = mode
        self.repo = tmp / "r.qvc"
        GitCheckpointStore(self.repo).close()  # the base: a created, cleanly closed repository
        self.base = powerloss.FS.load(str(self.repo))
        markers, log = tmp / "markers", tmp / "trace.log"
        writer = str(HERE / "workers" / "powerloss_writer.py")
        proc = subprocess.run([*powerloss.strace_command(str(log)), sys.executable, writer,
                               str(self.repo), mode, str(markers), *variant], env=child_env(), capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0 and "ptrace" in proc.stderr:
            pytest.skip(f"strace cannot trace here: {proc.stderr.strip()[:200]}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        self.views = [json.loads(line.split(" ", 2)[2]) for line in proc.stdout.splitlines()
                      if line.startswith("VIEW ")]
        self.ops = powerloss.parse(str(log), str(self.repo), str(markers), self.base)
        self.trace = powerloss.Trace(self.base, self.ops)
        self.log = log
        # Derived per position p (a crash right before ops[p]): operations begun, acknowledged, durable.
        self.begun, self.acked, self.durable = [], [], []
        begun = acked = durable = 0
        ack_index: list[int] = []  # op index of each ACK marker
        for i, op in enumerate(self.ops):
            self.begun.append(begun)
            self.acked.append(acked)
            self.durable.append(durable)
            if op.kind == "mark":
                text = op.data.decode().split()
                if text[0] == "BEGIN":
                    begun = int(text[1])
                elif text[0] == "ACK":
                    acked = int(text[1])
                    ack_index.append(i)
                    if mode == "sync":
                        durable = acked
                elif text[0] == "FLUSHED":
                    durable = acked
            elif mode == "async" and op.kind == "fsync" and op.path.endswith(".wal"):
                durable = max(durable, sum(1 for a in ack_index if a < op.start))
        self.begun.append(begun)
        self.acked.append(acked)
        self.durable.append(durable)
        self.ack_index = ack_index

    def journal_flushes(self) -> list[powerloss.Op]:
        return [op for op in self.ops if op.kind == "fsync" and op.path.endswith(".wal")]


_runs: dict[str, Run] = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    def get(mode: str, *variant: str) -> Run:
        key = " ".join((mode, *variant))
        if key not in _runs:
            _runs[key] = Run(tmp_path_factory.mktemp(f"powerloss-{mode}"), mode, *variant)
        return _runs[key]

    yield get
    _runs.clear()


def test_trace_replays_to_the_real_repository(runs):
    """The parser is faithful: replaying every operation gives the repository as the writer left it."""
    for mode in MODES:
        run = runs(mode)
        assert len(run.views) == len([s for s in pw.SCRIPT if s[0] not in ("flush", "sleep")]) + 1
        replayed = run.trace.state(len(run.ops), None, keep_data=True, keep_metadata=True)
        actual = powerloss.FS.load(str(run.repo))
        for path, ino in actual.files.items():
            assert path in replayed.files, f"[{mode}] {path} is missing from the replay"
            assert replayed.data.get(replayed.files[path], b"") == actual.data[ino], f"[{mode}] {path} differs"
        assert set(replayed.files) == set(actual.files)
        assert sum(op.kind == "fsync" for op in run.ops) > 0


def crash_points(run: Run, n: int, rng: random.Random) -> list[int]:
    """Positions worth cutting at (around markers, barriers and directory operations), sampled."""
    interesting = sorted({i for i, op in enumerate(run.ops) if op.kind != "write"}
                         | {i + 1 for i, op in enumerate(run.ops) if op.kind != "write"} | {len(run.ops)})
    if len(interesting) <= n:
        return interesting
    return sorted(rng.sample(interesting, n))


def check_states(run: Run, tmp: Path, n_points: int, seed: int) -> dict:
    rng = random.Random(seed)
    failures, seen = [], set()
    stats = {"points": 0, "states": 0, "replayed": 0, "lost_unacked": 0}
    for p in crash_points(run, n_points, rng):
        stats["points"] += 1
        variants = [run.trace.state(p, None), run.trace.state(p, None, keep_metadata=True),
                    run.trace.state(p, None, keep_data=True, keep_metadata=True)]
        variants += [run.trace.state(p, random.Random(rng.random())) for _ in range(2)]
        for v, fs in enumerate(variants):
            key = fs.fingerprint()
            if key in seen:
                continue
            seen.add(key)
            stats["states"] += 1
            where = f"[{run.mode} p={p}/{len(run.ops)} variant {v}]"
            state_dir = tmp / f"s{stats['states']}"
            error = check_state(run, fs, p, state_dir, stats)
            if error:
                failures.append(f"{where} {error}")
                if os.environ.get("QVC_POWERLOSS_KEEP"):  # for post-mortems: the state as the power cut left it
                    fs.write_to(str(state_dir / "before.qvc"))
    assert not failures, f"{len(failures)} crash states failed, first ones:\n" + "\n".join(failures[:8])
    return stats


def check_state(run: Run, fs: powerloss.FS, p: int, where: Path, stats: dict) -> str | None:
    repo = where / "r.qvc"
    fs.write_to(str(repo))
    try:
        try:
            store = GitCheckpointStore(repo, durability=run.mode, fsync=False)
        except QvcError as exc:
            return f"does not open: {exc!r}"
        try:
            stats["replayed"] += store.recovery.journals_replayed
            try:
                got = pw.view(store)
            except QvcError as exc:
                cut = {path: fs.data.get(ino, b"")[:48] for path, ino in sorted(fs.files.items())
                       if path.startswith(("refs/", "qvc/journal/"))}
                return (f"a checkpoint does not read back: {exc!r} (recovery: {store.recovery.summary()}; "
                        f"refs and journals as the power cut left them: {cut})")
        finally:
            store.close()
        try:
            fsck(repo)
        except AssertionError as exc:
            return str(exc)[:600]
        lo, hi = run.durable[p], run.begun[p]
        matches = [m for m in range(len(run.views)) if run.views[m] == got]
        if run.mode != "sync":
            # Un-flushed operations' git files reach the disk in any order the file system
            # picks, so the threads need not agree on one point: each must be as the writer saw
            # it after some operation in lo..hi.
            threads = set(got).union(*(set(v) for v in run.views))
            if all(any(run.views[m].get(t) == got.get(t) for m in range(lo, hi + 1)) for t in threads):
                matches = [m for m in matches if lo <= m <= hi] or [lo]
        if not any(lo <= m <= hi for m in matches):
            want = run.views[run.acked[p]]
            diff = {t: {"got": [e[:2] for e in got.get(t, [])], "acked": [e[:2] for e in want.get(t, [])]}
                    for t in sorted(set(got) | set(want)) if got.get(t) != want.get(t)}
            return (f"the repository is not the writer's after {lo}..{hi} operations "
                    f"(acknowledged {run.acked[p]}; it matches {matches or 'none'}); differs from acknowledged "
                    f"in {json.dumps(diff)[:600]}")
        # the power cut cost acknowledged (not yet durable) operations
        stats["lost_unacked"] += max(m for m in matches if lo <= m <= hi) < run.acked[p]
        return None
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize("mode", MODES)
def test_power_loss_states(runs, tmp_path, mode):
    stats = check_states(runs(mode), tmp_path, CI_STATES, seed=MODES.index(mode))
    print(f"\n[{mode}] power loss: {stats}")
    assert stats["states"] >= CI_STATES
    if mode == "sync":
        assert stats["lost_unacked"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_power_loss_states_many(runs, tmp_path, mode, request):
    if not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1)")
    n = int(os.environ.get("QVC_POWERLOSS_STATES", "400"))
    stats = check_states(runs(mode), tmp_path, n, seed=1000 + MODES.index(mode))
    print(f"\n[{mode}] power loss (long): {stats}")


@pytest.mark.parametrize("mode", MODES)
def test_power_loss_after_harden_and_close(runs, tmp_path, mode):
    """Hardening (mid-run, as a full journal does, and at close) flushes every git file the store
    wrote since the last harden, and only then restarts or removes the journal: a power cut
    anywhere after it loses nothing acknowledged, whichever un-flushed writes the disk drops.
    A file (a pack, its index, a ref, a reflog) or directory entry left out of the flush shows
    here: the journal that held it is gone, so the state right after close reads differently."""
    run = runs(mode, "harden")
    flushed = [i for i, op in enumerate(run.ops) if op.kind == "mark" and op.data.startswith(b"FLUSHED")]
    assert len(flushed) >= 2, "the writer did not harden and close"
    assert not any(op.kind == "syncfs" for op in run.ops), "hardening flushed the whole file system"
    end = len(run.ops)
    assert run.durable[end] == run.acked[end] == len(run.views) - 1
    # after close, with every un-flushed write dropped: git's files are all there, byte for byte
    # (what the close flushed by design; qvc's own derived files and hints are not git's)
    dropped, actual = run.trace.state(end, None), powerloss.FS.load(str(run.repo))
    for path, ino in actual.files.items():
        if path.startswith(("refs/", "logs/", "objects/", "packed-refs", "HEAD", "config", "qvc/reflogs/")):
            assert path in dropped.files, f"[{mode}] {path} is not durable after close"
            kept = dropped.data.get(dropped.files[path], b"")
            assert kept == actual.data[ino], f"[{mode}] {path} is torn after close"
    rng = random.Random(7 + MODES.index(mode))
    failures, states = [], 0
    for p in (flushed[0] + 1, end):  # right after each: every un-flushed write dropped, kept, or some
        variants = [run.trace.state(p, None), run.trace.state(p, None, keep_metadata=True)]
        variants += [run.trace.state(p, random.Random(rng.random())) for _ in range(4)]
        for v, fs in enumerate(variants):
            states += 1
            error = check_state(run, fs, p, tmp_path / f"h{states}", {"replayed": 0, "lost_unacked": 0})
            if error:
                failures.append(f"[{mode} p={p}/{end} variant {v}] {error}")
    assert not failures, f"{len(failures)} crash states failed, first ones:\n" + "\n".join(failures[:8])
    stats = check_states(run, tmp_path, CI_STATES // 2, seed=100 + MODES.index(mode))
    print(f"\n[{mode}] power loss after harden and close: {stats}")


def test_async_flusher_keeps_the_window(runs):
    """ASYNC: the flusher starts the journal flush covering an acknowledgement within max_lag. A
    flush covers the acknowledged write's record once it starts after the record's append (the
    publisher's journal flush may start between that append and the acknowledgement's mark)."""
    run = runs("async")
    flushes = run.journal_flushes()
    worst = 0.0
    for a in run.ack_index:
        t_ack = run.ops[a].time
        appended = max(i for i in range(a) if run.ops[i].kind == "write" and run.ops[i].path.endswith(".wal"))
        covering = [f for f in flushes if f.start > appended]
        assert covering, f"acknowledgement at op {a} was never flushed"
        worst = max(worst, covering[0].time - t_ack)
    assert worst <= pw.MAX_LAG + WINDOW_SLACK, f"a flush started {worst:.3f} s after an acknowledgement"


def _journal_records(run: Run) -> list[tuple[int, dict]]:
    """(op index, decoded record) of every journal append in the trace."""
    out = []
    for i, op in enumerate(run.ops):
        if op.kind == "write" and op.path.endswith(".wal") and op.offset > 0 and len(op.data) > 8:
            out.append((i, msgpack.unpackb(op.data[8:], raw=False)))
    return out


def test_sync_put_ordering(runs):
    """What SYNC promises, read off the trace of the scripted writer.

    qvc writes git's files without flushing them; the journal carries durability. So:

    1. every operation's journal record (its objects and ref moves) is appended and
       ``fdatasync``-ed before the operation is acknowledged, and the journal's name is made
       durable (``fsync`` of its directory) before the store changes any git file;
    2. a ref moves in git's files (when the publisher writes it, after the ack) only after the
       pack holding its objects is in place (renamed), so a process kill never leaves a ref to
       a missing object;
    3. before a store first moves a ref that already exists, a journal record holding the
       ref's current value is durable, so recovery can roll a power-cut ref back (or forward);
    4. every ref move that reaches git's files is in a journal record made durable (before
       the ack, by 1); the move may reach the disk before its objects do (nothing orders
       them): recovery rewrites the objects from that record.
    """
    run = runs("sync")
    records = _journal_records(run)
    flushes = run.journal_flushes()
    dir_syncs = [i for i, op in enumerate(run.ops) if op.kind == "fsync" and op.directory
                 and op.path == "qvc/journal"]
    begin = {int(op.data.split()[1]): i for i, op in enumerate(run.ops)
             if op.kind == "mark" and op.data.startswith(b"BEGIN")}
    packs_in_place: dict[str, int] = {}  # object id -> op index its pack was renamed into place
    checked_moves = 0
    first_move_seen: set[str] = set()
    existing = {p for p in run.base.files if p.startswith("refs/")}
    first_git = next(i for i, op in enumerate(run.ops) if op.kind in ("create", "rename", "link")
                     and (op.path + " " + op.dest).startswith(("objects/", "refs/")))
    assert dir_syncs and dir_syncs[0] < first_git, "a git file changed before the journal's name was durable"
    for k, a in enumerate(run.ack_index, start=1):
        b = begin[k]
        mine = [(i, r) for i, r in records if b < i < a]
        # (1) appended and flushed before the ack (a flush that started after the append)
        for i, _ in mine:
            assert any(f.start > i and run.ops.index(f) < a for f in flushes), (
                f"operation {k}: journal record at op {i} not flushed before its acknowledgement")
        assert dir_syncs and dir_syncs[0] < a, "the journal's name was not made durable before the first ack"
    # (2)-(4): every file operation in order; refs reach git's files when the publisher runs,
    # which may be during a later operation or after the last one
    for i, op in enumerate(run.ops):
        if op.kind == "rename" and op.dest.startswith("objects/pack/") and op.dest.endswith(".idx"):
            for oid in _idx_ids(_last_written(run, i)):  # the .pack was renamed first
                packs_in_place.setdefault(oid, i)
        if op.kind in ("rename", "link") and op.dest.startswith("refs/") and not op.dest.endswith(".lock"):
            ref = op.dest
            new = _last_written(run, i).decode().strip()
            assert new in packs_in_place and packs_in_place[new] < i, (
                f"op {i}: {ref} moved to {new} before the pack holding it was in place")
            if ref in existing and ref not in first_move_seen:
                noted = [j for j, r in records if j < i and any(x[0] == ref for x in r["r"])]
                assert noted and any(f.start > noted[-1] and run.ops.index(f) < i for f in flushes), (
                    f"op {i}: first move of existing {ref} before its old value was durable")
            first_move_seen.add(ref)
            existing.add(ref)
            checked_moves += 1
            # (4) a journal record names the move and is flushed (before its ack, by (1)); the
            # publisher may write a ref while the transaction moving it has yet to append it
            moved = [j for j, r in records if any(x[0] == ref and x[2] == new for x in r["r"])]
            assert moved and any(f.start > moved[0] for f in flushes), (
                f"op {i}: move of {ref} to {new} is in no flushed journal record")
    assert checked_moves >= 2


def _last_written(run: Run, i: int) -> bytes:
    """What a rename/link at ``ops[i]`` installs: the last data written to its source's file (written
    whole), whatever name it was written under (a lease is written beside its lock, linked as the
    lock, and its value written through the descriptor after)."""
    src = run.ops[i].path
    ino = _ino_at(run, i, src)
    for op in reversed(run.ops[:i]):
        if op.kind == "write" and (op.ino == ino if ino is not None else op.path == src):
            return op.data
    raise AssertionError(f"no content written to {src} before it was installed")


def _ino_at(run: Run, i: int, path: str) -> int | None:
    """The inode ``path`` names right before ``ops[i]`` (``None``: not made in the trace)."""
    for j in range(i - 1, -1, -1):
        op = run.ops[j]
        if op.kind == "create" and op.path == path:
            return op.ino
        if op.kind in ("link", "rename") and op.dest == path:
            return _ino_at(run, j, op.path)
    return None


def _idx_ids(idx: bytes) -> list[str]:
    """The object ids listed by a version 2 pack index."""
    assert idx[:8] == b"\xfftOc\x00\x00\x00\x02", "not a version 2 pack index"
    n = int.from_bytes(idx[8 + 255 * 4 : 8 + 256 * 4], "big")
    start = 8 + 256 * 4
    return [idx[start + 20 * j : start + 20 * (j + 1)].hex() for j in range(n)]
