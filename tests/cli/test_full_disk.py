"""A really full file system (issue 15, part D): a small tmpfs mounted for the test and filled
with a ballast file until the kernel answers ENOSPC.

Every command fails with one line and exit status 1, leaves nothing behind (no ``.qvc-init-*``,
temporary, lock or half-written file, no half-updated state directory), changes nothing, and
works again once the ballast is removed; the library raises :class:`~qvc.errors.StorageError`
keeping the errno, and nothing acknowledged is lost. Mounting needs root and the mount
capability (``CAP_SYS_ADMIN``); without them the tests are skipped, saying so.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import fsck, put, qvc, qvc_json  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.errors import QvcError, StorageError  # noqa: E402

SIZE = "4m"
LEFTOVER = (".qvc-init-", ".qvc-tmp-", ".tmp-", ".lock", ".wal.new", "tmp_obj_")


@pytest.fixture
def small_fs(tmp_path) -> Path:
    """A fresh tmpfs of :data:`SIZE` mounted at ``tmp_path/fs`` (unmounted afterwards)."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if os.geteuid() != 0 or not mount or not umount:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    target = tmp_path / "fs"
    target.mkdir()
    proc = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(target)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run([umount, "-l", str(target)], capture_output=True)


def fill(fs: Path) -> Path:
    """Write a ballast file until the file system refuses more (ENOSPC); return it."""
    ballast = fs / "ballast"
    with open(ballast, "ab", buffering=0) as f:
        chunk = b"\0" * 4096
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        while True:  # the last few bytes too
            try:
                f.write(b"\0")
            except OSError:
                break
    return ballast


def leftovers(root: Path) -> list[str]:
    """Temporary and lock files left behind; not the lock files qvc keeps in ``<repo>/qvc/``
    (``pack.lock``, ``ids/build.lock``: flock targets, like ``qvc/lock``)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if any(m in p.name for m in LEFTOVER)
                  and not (p.name.endswith(".lock") and "qvc" in p.relative_to(root).parts[1:-1]))


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (None for a directory), but the ballast, the
    checkpoint-id index (``qvc/ids/``: derived from the refs, rebuilt whenever it is stale) and
    the staging database's files, whose bytes are SQLite's (a rolled-back transaction may touch
    its log): what they hold is compared by the staged refs and by ``log --all``."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*")) if p.name != "ballast" and "ids" not in p.relative_to(root).parts[1:3]
            and not p.name.startswith("staging.db")} | {"staged": staged(root / ".qvc")}


def staged(repo: Path) -> bytes:
    """The staged refs of ``repo``, read as a read-only store reads them (the disk is full)."""
    from qvc.plumbing.staging import Staging

    staging = Staging(repo, readonly=True)
    try:
        return repr(sorted(staging.staged_refs("").items())).encode()
    finally:
        staging.close()


def one_line_exit_1(*args: str, cwd: Path) -> str:
    proc = qvc(*args, cwd=cwd, check=1)
    assert proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1, (args, proc.stderr)
    assert "No space left on device" in proc.stderr, proc.stderr
    return proc.stderr


def test_commands_on_a_full_disk(small_fs):
    repo = small_fs / ".qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"plan": [f"p{k}" for k in range(i + 1)], "n": i})
        put(store, "other", "o0", 0, {"n": 0})
        store.checkout("main")
    qvc("checkout", "main~1", "--to", "st", cwd=small_fs)
    (small_fs / "st" / "n.json").write_text("9\n")
    qvc("commit", "st", "-m", "before", cwd=small_fs)
    history = qvc_json("log", "--all", cwd=small_fs)
    ballast = fill(small_fs)
    before = tree(small_fs)

    one_line_exit_1("init", "new.qvc", cwd=small_fs)
    assert not (small_fs / "new.qvc").exists()
    one_line_exit_1("checkout", "other", cwd=small_fs)
    one_line_exit_1("checkout", "main", "--to", "fresh", cwd=small_fs)
    assert not (small_fs / "fresh").exists()
    one_line_exit_1("checkout", "main~2", "--to", "st", cwd=small_fs)
    (small_fs / "st" / "n.json").write_text("10\n")  # an edit in place takes no new block
    edited = tree(small_fs)
    one_line_exit_1("commit", "st", "-m", "on a full disk", cwd=small_fs)
    for args in (["branch", "fork"], ["reset", "main~1"], ["branch", "-m", "other", "renamed"],
                 ["checkout", "-b", "new", "m0"], ["gc"], ["gc", "--prune"]):
        one_line_exit_1(*args, cwd=small_fs)
    assert tree(small_fs) == edited, "a failed command changed something"
    assert {k: v for k, v in edited.items() if k != "st/n.json"} == {k: v for k, v in before.items()
                                                                   if k != "st/n.json"}
    assert leftovers(small_fs) == []
    # reading still works on a full disk
    assert qvc_json("log", "--all", cwd=small_fs) == history
    assert qvc_json("status", cwd=small_fs)["thread"] == "main"
    # A delete may free the space it then needs (the ref's own file): either it is done, whole,
    # or it fails with one line and changes nothing.
    deleted = qvc("branch", "-D", "other", cwd=small_fs, check=None)
    if deleted.returncode == 0:
        assert "other" not in {t["thread"] for t in qvc_json("branch", cwd=small_fs)}
        history = [e for e in history if e["thread"] != "other"]
        fsck(repo)
    else:
        one_line_exit_1("branch", "-D", "other", cwd=small_fs)
        assert tree(small_fs) == edited
    assert leftovers(small_fs) == []

    ballast.unlink()  # space again: the same commands work
    qvc("init", "new.qvc", cwd=small_fs)
    qvc("checkout", "main", "--to", "fresh", cwd=small_fs)
    done = json.loads(qvc("commit", "st", "-m", "later", "--json", cwd=small_fs).stdout)
    assert qvc_json("show", done["id"], cwd=small_fs)["state"]["n"] == 10
    qvc("branch", "fork", cwd=small_fs)
    qvc("checkout", "main" if deleted.returncode == 0 else "other", cwd=small_fs)
    assert {e["id"] for e in history} <= {e["id"] for e in qvc_json("log", "--all", cwd=small_fs)}
    assert leftovers(small_fs) == []
    fsck(repo)


def test_the_library_on_a_full_disk(small_fs):
    path = small_fs / "runs.qvc"
    acknowledged = []
    store = GitCheckpointStore(path)
    try:
        ballast = small_fs / "ballast"
        with open(ballast, "wb") as f:  # leave room for a few dozen checkpoints only
            f.write(b"\0" * (os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize - 200_000))
        failure = None
        for i in range(10_000):
            cp = Checkpoint(id=f"c{i}", thread_id="t", step=i, state_data={"blob": os.urandom(4000).hex(), "i": i})
            try:
                store.put(CheckpointConfig("t"), cp, {"step": i})
            except QvcError as exc:
                failure = exc
                break
            acknowledged.append(cp.id)
        assert isinstance(failure, StorageError) and isinstance(failure, OSError), repr(failure)
        assert failure.errno == errno.ENOSPC and "No space left on device" in str(failure)
        assert acknowledged and store.commit_info(store.head("t")).checkpoint_id == acknowledged[-1]
        with pytest.raises(StorageError) as again:  # still full: the same error, nothing stored
            store.put(CheckpointConfig("t"), Checkpoint(id="x", thread_id="t", step=0,
                                                        state_data={"blob": os.urandom(8000).hex()}), {})
        assert again.value.errno == errno.ENOSPC
        ballast.unlink()
        store.put(CheckpointConfig("t"), Checkpoint(id="after", thread_id="t", step=len(acknowledged),
                                                    state_data={"i": -1}), {})
        acknowledged.append("after")
    finally:
        store.close()
    with GitCheckpointStore(path) as store:
        ids = [t.checkpoint.id for t in store.list(CheckpointConfig("t"))]
    assert ids == acknowledged[::-1], "an acknowledged checkpoint was lost"
    assert leftovers(small_fs) == []
    fsck(path)


def test_threads_sharing_commits_on_a_full_disk(small_fs):
    """Four threads of one SYNC store write at once (their transactions share commits, see
    qvc.plumbing.staging) until the disk is full: a put that raised stored nothing, and every
    put that returned is kept, whichever thread's write filled the disk."""
    import threading

    path = small_fs / "runs.qvc"
    acknowledged: dict[str, list[str]] = {f"t{n}": [] for n in range(4)}
    failures: dict[str, BaseException] = {}
    store = GitCheckpointStore(path)
    try:
        ballast = small_fs / "ballast"
        # room for a few dozen checkpoints: each takes about 20 KB of the log and the pack, and a
        # publication under load writes the log again as it deletes what it published
        with open(ballast, "wb") as f:
            f.write(b"\0" * (os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize - 900_000))

        def writer(thread: str) -> None:
            for i in range(10_000):
                cp = Checkpoint(id=f"{thread}-{i}", thread_id=thread, step=i,
                                state_data={"blob": os.urandom(3000).hex(), "i": i})
                try:
                    store.put(CheckpointConfig(thread), cp, {"step": i})
                except QvcError as exc:
                    failures[thread] = exc
                    return
                acknowledged[thread].append(cp.id)

        threads = [threading.Thread(target=writer, args=(t,)) for t in acknowledged]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(failures) == set(acknowledged), failures  # every thread met the full disk
        assert sum(map(len, acknowledged.values())) > 4, acknowledged  # after writing for a while
        for exc in failures.values():
            assert isinstance(exc, StorageError), repr(exc)
        ballast.unlink()
        for thread, ids in acknowledged.items():  # writes work again, on each thread's acknowledged head
            step = len(ids)
            store.put(CheckpointConfig(thread), Checkpoint(id=f"{thread}-after", thread_id=thread, step=step,
                                                           state_data={"i": -1}), {})
            ids.append(f"{thread}-after")
    finally:
        store.close()
    with GitCheckpointStore(path) as store:
        for thread, ids in acknowledged.items():
            assert [t.checkpoint.id for t in store.list(CheckpointConfig(thread))] == ids[::-1], thread
    assert leftovers(small_fs) == []
    fsck(path)


def test_init_on_a_full_disk_leaves_nothing(small_fs):
    fill(small_fs)
    with pytest.raises(StorageError) as caught:
        GitCheckpointStore(small_fs / "r.qvc")
    assert caught.value.errno == errno.ENOSPC
    assert sorted(p.name for p in small_fs.iterdir()) == ["ballast"]
