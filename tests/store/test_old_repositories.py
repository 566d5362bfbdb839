"""Repositories written by the journal-and-leases release open with nothing lost (issue 31, item 6).

The archives in tests/fixtures/old_release/ were made by that release (its make.py says how): one
closed cleanly, one whose writer froze right after acknowledged SYNC puts, leaving its journal
and its leases (refs' lock files). Each is opened as it is, read-only and writable, and must show
every thread's line, superseded lines, pending writes, record and tag its manifest lists; a put
then extends it, and plain git finds it whole."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from helpers import fsck, put

from qvc import CheckpointConfig, GitCheckpointStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "old_release"


def unpack(name: str, into: Path) -> tuple[Path, dict]:
    with tarfile.open(FIXTURES / name) as tar:
        tar.extractall(into, filter="tar")
    return into / "repo.qvc", json.loads((into / "manifest.json").read_text())


def check(store: GitCheckpointStore, manifest: dict) -> None:
    assert store.threads() == sorted(manifest["threads"])
    for thread, want in manifest["threads"].items():
        line = [t.checkpoint.id for t in store.list(CheckpointConfig(thread))]
        every = {t.checkpoint.id for t in store.list(CheckpointConfig(thread), superseded=True)}
        head = store.get_tuple(CheckpointConfig(thread))
        assert line == want["line"], thread
        assert sorted(every - set(line)) == want["superseded"], thread
        assert [list(w) for w in head.pending_writes or []] == want["pending_writes"], thread
        assert (store.thread_record(thread) or b"").decode() == want["record"], thread
    assert {name: store.commit_info(sha).checkpoint_id for name, sha in store.tags()} == manifest["tags"]


@pytest.mark.parametrize("name", ["clean.tar.gz", "dead-writer.tar.gz"])
def test_an_old_release_repository_opens_with_nothing_lost(tmp_path, name):
    repo, manifest = unpack(name, tmp_path)
    with GitCheckpointStore(repo, readonly=True) as reader:
        check(reader, manifest)
    with GitCheckpointStore(repo) as store:
        check(store, manifest)
        head = manifest["threads"]["main"]["line"][0]
        put(store, "main", "after-upgrade", parent_id=head)
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("main"), limit=2)] == ["after-upgrade", head]
    fsck(repo)
    with GitCheckpointStore(repo) as store:  # and again, as the next opener finds it
        assert store.get_tuple(CheckpointConfig("main")).checkpoint.id == "after-upgrade"
