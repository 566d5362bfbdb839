"""Erasure: after ``delete``, ``delete_thread`` and ``purge``, a deleted value is nowhere in the
repository's files.

Each test writes unique secrets (in a state field, a pending write, a run's message), keeps
other data next to them, deletes the secrets' checkpoints, threads or run, purges, closes the
store, and then looks for the secrets in every file under the repository: raw bytes of every
file (the staging database and its log, reflogs, packed-refs, config, indexes...), every loose
object inflated, and every object git can list (``git cat-file --batch-all-objects --batch``:
packed objects inflated and deltas resolved), including unreachable ones. The kept data must
still read back.
"""

from __future__ import annotations

import os
import uuid
import zlib
from pathlib import Path

from helpers import put, run_git

from qvc import CheckpointConfig, GitCheckpointStore
from qvc.runs import Runs, RunStatus


def found_in(path: Path, secrets: list[bytes]) -> list[str]:
    """Where any of ``secrets`` occurs in the repository at ``path``."""
    hits = []
    for top, _dirs, files in os.walk(path):
        for name in files:
            f = Path(top) / name
            data = f.read_bytes()
            rel = f.relative_to(path)
            for s in secrets:
                if s in data:
                    hits.append(f"{rel} (raw)")
            if len(rel.parts) == 3 and rel.parts[0] == "objects" and len(rel.parts[1]) == 2:
                inflated = zlib.decompress(data)
                hits += [f"{rel} (loose object)" for s in secrets if s in inflated]
    listed = run_git(path, "cat-file", "--batch-all-objects", "--batch", "--unordered", text=False).stdout
    hits += [f"git object (packed or loose): {s!r}" for s in secrets if s in listed]
    return hits


def test_deleted_checkpoints_and_threads_are_unrecoverable_after_purge(tmp_path):
    path = tmp_path / "r.qvc"
    s1, s2, s3, s4 = (f"SECRET-{uuid.uuid4().hex}" for _ in range(4))
    secrets = [s.encode() for s in (s1, s2, s3, s4)]
    with GitCheckpointStore(path) as store:
        put(store, "keep", "k1", state={"v": "kept"})
        put(store, "keep", "k2", state={"v": "kept too", "notes": ["a"] * 100})
        put(store, "keep", "x1", state={"v": s1, "notes": ["a"] * 100})  # its head, then deleted
        put(store, "gone", "g1", state={"v": s2})
        put(store, "gone", "g2", state={"v": "plain", "deep": {"list": [s3]}})
        store.put_writes(CheckpointConfig("gone", "g2"), [("ch", {"w": s4})], "task")
        store.reset("gone", "g1")  # g2 is now on a superseded line, with its pending writes
        store.delete(CheckpointConfig("keep"))
        store.delete_thread("gone")
        store.purge()
        assert store.get_tuple(CheckpointConfig("keep")).checkpoint.id == "k2"
    hits = found_in(path, secrets)
    assert not hits, f"deleted values are still in the repository: {hits}"
    with GitCheckpointStore(path) as store:
        assert store.get_tuple(CheckpointConfig("keep", "k1")).checkpoint.state_data == {"v": "kept"}
        assert store.get_tuple(CheckpointConfig("any", "x1")) is None
        assert store.head("gone") is None


def test_secret_is_found_before_purge(tmp_path):
    """The scan can fail: before purge, a deleted value is still in the object store."""
    path = tmp_path / "r.qvc"
    secret = f"SECRET-{uuid.uuid4().hex}"
    with GitCheckpointStore(path) as store:
        put(store, "t", "a", state={"v": "kept"})
        put(store, "t", "b", state={"v": secret})
        store.delete(CheckpointConfig("t"))
    assert found_in(path, [secret.encode()])


def test_deleted_run_is_unrecoverable_after_purge(tmp_path):
    path = tmp_path / "r.qvc"
    secret = f"SECRET-{uuid.uuid4().hex}"
    with GitCheckpointStore(path) as store:
        runs = Runs(store)
        rec = runs.start("hello", run_id="kept", session_id="s")
        rec.add_message({"role": "assistant", "content": "fine"})
        rec.complete("done")
        rec = runs.start("tell me", run_id="secret-run", session_id="s2")
        rec.add_message({"role": "assistant", "content": secret})
        rec.complete(secret)
        store.delete_thread(runs.thread("secret-run"))
        store.purge()
        assert runs.get("kept").status == RunStatus.COMPLETED
    hits = found_in(path, [secret.encode()])
    assert not hits, f"a deleted run's messages are still in the repository: {hits}"


def test_listed_then_deleted_values_are_unrecoverable_after_purge(tmp_path):
    """A list writes the thread's summary file (``qvc/threads/``, a copy of headers and small
    field blobs); purge removes it with the rest."""
    path = tmp_path / "r.qvc"
    secret = f"SECRET-{uuid.uuid4().hex}"
    with GitCheckpointStore(path) as store:
        put(store, "t", "a", state={"v": "kept"})
        put(store, "t", "b", state={"v": secret}, metadata={"note": secret + "-meta"})
        assert len(list(store.list(CheckpointConfig("t")))) == 2
        assert any(secret.encode() in f.read_bytes() for f in (path / "qvc" / "threads").iterdir())
        store.delete(CheckpointConfig("t"))
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["a"]
        store.purge()
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("t"))] == ["a"]
    assert not found_in(path, [secret.encode()])
