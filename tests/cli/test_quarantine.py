"""Repairs move junk aside, never delete it, and say what they did (issue 25), through the real CLI.

A garbage pack, a file in the journal directory that is no journal and a ref naming lost
commits go into ``qvc/quarantine/<UTC time>/`` (named in the output), the ref is reported
removed (not restored); a garbage pack index is rebuilt from its pack; a torn pack is moved
aside by ``qvc gc``. git, gc and fsck ignore the quarantine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from helpers import fsck, put, qvc, qvc_json

from qvc import GitCheckpointStore

GARBAGE_PACK = "objects/pack/pack-" + "0123456789" * 4 + ".pack"


@pytest.fixture
def repo(tmp_path) -> Path:
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for i in range(3):
            put(store, "t", f"c{i}", i, {"n": i, "text": "x" * (i + 1)})
        store.checkout("t")
    return path


def the_pack(repo: Path) -> Path:
    (idx,) = (repo / "objects" / "pack").glob("pack-*.idx")
    return idx.with_suffix("")


def quarantine_of(output: str, repo: Path) -> Path:
    m = re.search(r"moved aside to (qvc/quarantine/[0-9TZ-]+)/", output)
    assert m, output
    return repo / m.group(1)


def test_status_moves_junk_aside_and_says_what_it_did(repo):
    log_before = qvc_json("log", cwd=repo.parent, QVC_DIR=str(repo))
    (repo / GARBAGE_PACK).write_bytes(b"garbage\n")
    (repo / "qvc" / "journal").mkdir()  # as the journal-and-leases release left it (issue 31)
    (repo / "qvc" / "journal" / "123-abc.wal").write_bytes(b"not a journal\n")
    (repo / "refs" / "heads" / "ghost").write_text("0" * 37 + "bad\n")  # names no object
    proc = qvc("--repo", str(repo), "status")
    out = proc.stdout + proc.stderr
    assert "removed ref(s) refs/heads/ghost" in out and "restored ref(s) refs/heads/ghost" not in out, out
    assert "replayed" not in out  # no journal of qvc's was replayed
    aside = quarantine_of(out, repo)
    assert (aside / GARBAGE_PACK).read_bytes() == b"garbage\n"
    assert (aside / "qvc" / "journal" / "123-abc.wal").read_bytes() == b"not a journal\n"
    assert (aside / "refs" / "heads" / "ghost").read_text() == "0" * 37 + "bad\n"
    assert not (repo / GARBAGE_PACK).exists() and not (repo / "refs" / "heads" / "ghost").exists()
    assert os.listdir(repo / "qvc" / "journal") == []
    # later runs repair nothing, and name the folder until it is deleted
    again = qvc("--repo", str(repo), "status")
    assert "recovered on open" not in again.stdout + again.stderr
    assert f"files moved aside by a repair: {aside}" in again.stdout
    assert qvc_json("--repo", str(repo), "status")["quarantine"] == [str(aside)]
    # git, gc and fsck ignore the quarantine; the checkpoints are all there
    assert qvc_json("log", cwd=repo.parent, QVC_DIR=str(repo)) == log_before
    qvc("--repo", str(repo), "gc", "--prune")
    assert (aside / GARBAGE_PACK).is_file()
    checked = qvc("--repo", str(repo), "fsck")  # healthy (exit 0), and it names the folder
    assert f"warning: files moved aside by a repair: {aside}" in checked.stderr, checked.stderr
    assert qvc_json("--repo", str(repo), "fsck")["warnings"] == [
        f"files moved aside by a repair: {aside} (nothing reads them; look, then delete it)"]
    fsck(repo)


@pytest.mark.parametrize("garbage", [b"garbage\n", os.urandom(4096)], ids=["short", "long"])
def test_a_garbage_pack_index_is_rebuilt_from_its_pack(repo, garbage):
    base = the_pack(repo)
    good = base.with_suffix(".idx").read_bytes()
    base.with_suffix(".idx").chmod(0o644)
    base.with_suffix(".idx").write_bytes(garbage)
    proc = qvc("--repo", str(repo), "log", "--oneline")  # a reader: repaired on open, then read
    assert len(proc.stdout.splitlines()) == 3, proc.stdout + proc.stderr
    assert f"rebuilt pack index(es) {base.name}.idx" in proc.stderr
    assert base.with_suffix(".idx").read_bytes() == good  # the same index, rebuilt
    aside = quarantine_of(proc.stderr, repo)
    assert (aside / "objects" / "pack" / f"{base.name}.idx").read_bytes() == garbage
    assert qvc_json("--repo", str(repo), "show", "t")["state"]["n"] == 2
    fsck(repo)


def test_gc_moves_a_torn_pack_aside(repo):
    base = the_pack(repo)
    copy = base.with_name("pack-" + "ab" * 20)  # the same objects again, then torn
    data = base.with_suffix(".pack").read_bytes()
    copy.with_suffix(".pack").write_bytes(data[: len(data) // 2])
    copy.with_suffix(".idx").write_bytes(base.with_suffix(".idx").read_bytes())
    proc = qvc("--repo", str(repo), "gc")
    aside = quarantine_of(proc.stderr, repo)
    assert (aside / "objects" / "pack" / f"{copy.name}.pack").read_bytes() == data[: len(data) // 2]
    assert (aside / "objects" / "pack" / f"{copy.name}.idx").is_file()
    assert not copy.with_suffix(".pack").exists()
    assert len(qvc_json("--repo", str(repo), "log")) == 3
    fsck(repo)
