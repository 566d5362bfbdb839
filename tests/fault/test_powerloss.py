"""Power loss, simulated from a real system-call record.

A scripted writer (tests/fault/workers/powerloss_writer.py: puts, pending writes, a fork, a reset, deletes)
runs under ``strace`` in each durability mode. :mod:`powerloss` rebuilds every file-system
operation it made on the repository (the staging database ``qvc/staging.db`` and its log
``qvc/staging.db-wal``, and git's files that publication writes) and the states a power cut
could leave at many points of the run (un-synced data dropped or torn, un-synced directory
operations kept as a prefix, see its docstring). Each state is written to a directory and
opened with qvc (which publishes what is staged). Then:

- ``git fsck --strict`` accepts it, every checkpoint on every thread decodes, nothing is left
  staged and plain git's refs are qvc's heads;
- SYNC: the repository is exactly as the writer saw it after ``m`` of its operations (nothing
  half-done), ``m`` at least every acknowledged operation and at most those begun;
- ASYNC and EXIT: each thread is exactly as the writer saw it after some ``m`` between the
  operations made durable (acknowledged before a completed ``fdatasync`` of the log: ASYNC's
  flusher starts one within ``max_lag`` of an acknowledgement; EXIT's comes with ``flush()``)
  and those begun. Publication flushes git's files before the staged rows go, so git's files
  may hold an operation the log lost: threads need not agree on one ``m``.

``test_sync_put_ordering`` reads the SYNC trace directly and checks the order of the log's
flushes against the writes to git's files (what qvc's design promises, see its docstring).

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

import pytest

HERE = Path(__file__).resolve().parent
for _where in (HERE, HERE / "workers"):
    if str(_where) not in sys.path:
        sys.path.insert(0, str(_where))

import powerloss  # noqa: E402
import powerloss_writer as pw  # noqa: E402
from helpers import child_env, fsck, run_git  # noqa: E402
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
WAL = "qvc/staging.db-wal"  # the staging database's log: every acknowledged write is here first
SHM = "qvc/staging.db-shm"  # SQLite's index of the log, written through a memory map (not traced)
PUBLISHING = "qvc/publishing"  # the locks a publisher links into place, noted before (staging's docstring)


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
            elif op.kind == "fsync" and op.path == WAL:  # ASYNC's flusher, a rewrite, a checkpoint
                durable = max(durable, sum(1 for a in ack_index if a < op.start))
        self.begun.append(begun)
        self.acked.append(acked)
        self.durable.append(durable)
        self.ack_index = ack_index
        self.main = next(op.tid for op in self.ops if op.kind == "mark")  # the writer's own thread
        # A publisher notes each lock it links into place in qvc/publishing by the file's identity
        # (device, inode, mtime) and absolute path: each note line of the traced run -> the file
        # of the trace it names (the last one the publisher created in qvc/publishing.d).
        self.noted: dict[str, int] = {}
        made = 0
        for op in self.ops:
            if op.kind == "create" and op.path.startswith("qvc/publishing.d/"):
                made = op.ino
            elif op.kind == "write" and op.path == PUBLISHING and made:
                for line in op.data.decode(errors="replace").splitlines():
                    self.noted[line] = made

    def wal_flushes(self) -> list[powerloss.Op]:
        return [op for op in self.ops if op.kind == "fsync" and op.path == WAL]


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
            if path == SHM:
                continue  # written through a memory map
            assert replayed.data.get(replayed.files[path], b"") == actual.data[ino], f"[{mode}] {path} differs"
        assert set(replayed.files) == set(actual.files)
        assert sum(op.kind == "fsync" for op in run.ops) > 0
        assert any(op.kind == "write" and op.path == WAL for op in run.ops), f"[{mode}] the log was never written"


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
    stats = {"points": 0, "states": 0, "lost_unacked": 0}
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


def _translate_notes(run: Run, fs: powerloss.FS, repo: Path) -> None:
    """Write the state's qvc/publishing as it would read at the state's place: a state is written
    at another path, in new files (new inodes), so each note naming a lock file is rewritten to
    name the file written for it, when the state's lock is the very file noted (else the note
    names no file there, as it would name no file at the lock's path after the power cut)."""
    ino = fs.files.get(PUBLISHING)
    if ino is None:
        return
    lines = []
    for line in fs.data.get(ino, b"").decode(errors="replace").splitlines(keepends=True):
        parts = line.split(" ", 3)
        if len(parts) != 4 or not parts[1].isdigit() or not line.endswith("\n"):
            lines.append(line)  # torn: as it is
            continue
        lock = parts[3].rstrip("\n")
        rel = os.path.relpath(lock, run.repo)
        here = repo / rel
        traced = run.noted.get(line.rstrip("\n"))
        if traced is not None and fs.files.get(os.path.normpath(rel)) == traced and here.exists():
            st = here.stat()
            parts[:3] = [str(st.st_dev), str(st.st_ino), str(st.st_mtime_ns)]
        lines.append(" ".join(parts[:3] + [str(here)]) + "\n")
    (repo / PUBLISHING).write_text("".join(lines))


def check_state(run: Run, fs: powerloss.FS, p: int, where: Path, stats: dict) -> str | None:
    repo = where / "r.qvc"
    fs.write_to(str(repo))
    _translate_notes(run, fs, repo)
    try:
        try:
            store = GitCheckpointStore(repo, durability=run.mode, fsync=False)
        except QvcError as exc:
            return f"does not open: {exc!r}"
        try:
            try:
                got = pw.view(store)
                heads = {t: store.head(t) for t in got}
            except QvcError as exc:
                cut = {path: fs.data.get(ino, b"")[:48] for path, ino in sorted(fs.files.items())
                       if path.startswith("refs/")}
                return (f"a checkpoint does not read back: {exc!r} (recovery: {store.recovery.summary()}; "
                        f"refs as the power cut left them: {cut})")
            left = store.repository.staging.staged()
        finally:
            store.close()
        try:
            fsck(repo)
        except AssertionError as exc:
            return str(exc)[:600]
        if left:
            return f"the open left {left} ref(s) staged, unpublished (git's files lack acknowledged writes)"
        refs = run_git(repo, "for-each-ref", "--format=%(refname:lstrip=2) %(objectname)", "refs/heads/").stdout
        git_heads = dict(line.split() for line in refs.splitlines())
        if {t: git_heads.get(t) for t in heads} != heads:
            return f"plain git's heads {git_heads} are not qvc's {heads}"
        lo, hi = run.durable[p], run.begun[p]
        matches = [m for m in range(len(run.views)) if run.views[m] == got]
        if run.mode != "sync":
            # Git's files may hold an operation the log lost (publication flushes them before
            # the staged rows go), so the threads need not agree on one point: each must be as
            # the writer saw it after some operation in lo..hi.
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
def test_power_loss_after_flush_and_close(runs, tmp_path, mode):
    """``flush()`` (mid-run) and ``close()`` make everything acknowledged durable in every mode:
    the database's log flushed, what is staged published to git's files and each file written
    flushed (never the whole file system). A power cut anywhere after either loses nothing
    acknowledged, whichever un-flushed writes the disk drops. A file (a pack, its index, a ref,
    a reflog) or directory entry left out of the flush shows here: the state right after close,
    with every un-flushed write dropped, reads differently."""
    run = runs(mode, "flush")
    flushed = [i for i, op in enumerate(run.ops) if op.kind == "mark" and op.data.startswith(b"FLUSHED")]
    assert len(flushed) >= 2, "the writer did not flush and close"
    assert not any(op.kind == "syncfs" for op in run.ops), "a flush of the whole file system"
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
            error = check_state(run, fs, p, tmp_path / f"h{states}", {"lost_unacked": 0})
            if error:
                failures.append(f"[{mode} p={p}/{end} variant {v}] {error}")
    assert not failures, f"{len(failures)} crash states failed, first ones:\n" + "\n".join(failures[:8])
    stats = check_states(run, tmp_path, CI_STATES // 2, seed=100 + MODES.index(mode))
    print(f"\n[{mode}] power loss after flush and close: {stats}")


def test_async_flusher_keeps_the_window(runs):
    """ASYNC: the flusher starts the flush of the log covering an acknowledgement within max_lag:
    one that starts after the last write of the acknowledged operation to the log (an operation
    that rewrites history flushes the log itself, before its acknowledgement)."""
    run = runs("async")
    flushes = run.wal_flushes()
    begin = _begins(run)
    worst = 0.0
    for k, a in enumerate(run.ack_index, start=1):
        mine = [i for i in range(begin[k], a) if run.ops[i].tid == run.main and run.ops[i].path == WAL]
        if any(run.ops[i].kind == "fsync" for i in mine):
            continue  # durable before its acknowledgement
        appended = max(i for i in mine if run.ops[i].kind == "write")
        covering = [f for f in flushes if f.start > appended]
        assert covering, f"acknowledgement at op {a} was never flushed"
        worst = max(worst, covering[0].time - run.ops[a].time)
    assert worst <= pw.MAX_LAG + WINDOW_SLACK, f"a flush started {worst:.3f} s after an acknowledgement"


def _begins(run: Run) -> dict[int, int]:
    return {int(op.data.split()[1]): i for i, op in enumerate(run.ops)
            if op.kind == "mark" and op.data.startswith(b"BEGIN")}


def _flushed_between(run: Run, after: int, before: int) -> bool:
    """Whether a flush of the log started after op ``after`` and completed before op ``before``."""
    return any(f.start > after and i < before for i, f in enumerate(run.ops) if f.kind == "fsync" and f.path == WAL)


def test_sync_put_ordering(runs):
    """What SYNC promises, read off the trace of the scripted writer.

    The staging database carries durability until git's files hold a write. So:

    1. every operation's writes to the database's log are flushed (``synchronous=FULL``: SQLite
       flushes inside COMMIT) before the operation is acknowledged, and the log's name is made
       durable (``fsync`` of its directory) before the first acknowledgement;
    2. a ref moves in git's files (when a publisher writes it, after the commit) only after the
       pack holding its objects is in place (renamed), so a process kill never leaves a ref to
       a missing object;
    3. every ref move that reaches git's files is in the log, flushed, before (the publisher
       publishes only committed rows: a value that reaches git's files is acknowledged);
    4. a publication deletes the staged rows (its next write to the log) only once every git
       file it wrote is flushed: the pack, the reflog lines, the ref files' data and the
       directory entries (renames, unlinks). Else a power cut after it could lose a published
       move that the database no longer holds.
    """
    run = runs("sync")
    begin = _begins(run)
    wal_created = [i for i, op in enumerate(run.ops) if op.kind == "create" and op.path == WAL]
    dir_syncs = [i for i, op in enumerate(run.ops) if op.kind == "fsync" and op.directory and op.path == "qvc"]
    # (1)
    for k, a in enumerate(run.ack_index, start=1):
        b = begin[k]
        mine = [i for i in range(b, a) if run.ops[i].kind == "write" and run.ops[i].path == WAL
                and run.ops[i].tid == run.main]
        assert mine, f"operation {k} wrote nothing to the log"
        for i in mine:
            assert _flushed_between(run, i, a), (
                f"operation {k}: its write to the log at op {i} was not flushed before its acknowledgement")
    if wal_created:
        assert any(run.ops[d].start > wal_created[0] and d < run.ack_index[0] for d in dir_syncs), (
            "the log's name was not made durable before the first acknowledgement")
    # (2)-(4): every file operation in order; refs reach git's files when a publisher runs,
    # which may be during a later operation or after the last one
    packs_in_place: dict[str, int] = {}  # object id -> op index its pack was renamed into place
    checked_moves = checked_publications = 0
    for i, op in enumerate(run.ops):
        if op.kind == "rename" and op.dest.startswith("objects/pack/") and op.dest.endswith(".idx"):
            for oid in _idx_ids(_last_written(run, i)):  # the .pack was renamed first
                packs_in_place.setdefault(oid, i)
        if op.kind in ("rename", "link") and op.dest.startswith("refs/heads/") and not op.dest.endswith(".lock"):
            ref = op.dest
            new = _last_written(run, i).decode().strip()
            assert new in packs_in_place and packs_in_place[new] < i, (
                f"op {i}: {ref} moved to {new} before the pack holding it was in place")
            noted = [j for j in range(i) if run.ops[j].kind == "write" and run.ops[j].path == WAL
                     and new.encode() in run.ops[j].data]
            assert noted and _flushed_between(run, noted[0], i), (
                f"op {i}: {ref} moved to {new} in git's files before the log held the move, flushed")
            checked_moves += 1
        if _published_file(op):
            deleted = next((j for j in range(i + 1, len(run.ops)) if run.ops[j].tid == op.tid
                            and run.ops[j].kind == "write" and run.ops[j].path == WAL), None)
            if deleted is None:
                continue  # the trace ends first (the writer's last publication ends inside it)
            steps = [i] + ([_write_index(run, i)] if op.kind in ("rename", "link") and op.dest.startswith("refs/")
                           else [])
            for s in steps:
                assert run.trace.covered_at[s] < deleted, (
                    f"op {i} ({op.kind} {op.path} {op.dest}): not flushed before its publication deleted "
                    f"the staged rows (op {deleted})")
            checked_publications += 1
    assert checked_moves >= 2 and checked_publications >= 4


def _published_file(op: powerloss.Op) -> bool:
    """Whether ``op`` is a publication's change to git's files: a ref or pack put in place,
    ``packed-refs`` replaced, a reflog line appended, a directory made for a ref or its
    reflog, a ref or its reflog removed."""
    if op.kind in ("rename", "link"):
        return (op.dest.startswith("refs/") and not op.dest.endswith(".lock")) or op.dest == "packed-refs" or (
            op.dest.startswith("objects/pack/"))
    if op.kind == "write":
        return op.path.startswith("logs/")
    if op.kind == "mkdir":  # durable once its parent's entries are
        return op.path.startswith(("refs/", "logs/"))
    return op.kind == "unlink" and op.path.startswith(("refs/", "logs/")) and not op.path.endswith(".lock")


def _write_index(run: Run, i: int) -> int:
    """The index of the last data write to the file a rename/link at ``ops[i]`` installs."""
    src = run.ops[i].path
    ino = _ino_at(run, i, src)
    for j in range(i - 1, -1, -1):
        op = run.ops[j]
        if op.kind == "write" and (op.ino == ino if ino is not None else op.path == src):
            return j
    raise AssertionError(f"no content written to {src} before it was installed")


def _last_written(run: Run, i: int) -> bytes:
    """What a rename/link at ``ops[i]`` installs: the last data written to its source's file (written
    whole), whatever name it was written under (a publisher's lock is written under its own name,
    linked as the lock, then renamed as the ref)."""
    return run.ops[_write_index(run, i)].data


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
