"""The per-thread summary files (``qvc/threads/``, :mod:`qvc.store.summaries`): a derived cache a
list reads instead of each checkpoint's commit, tree and header. Every case where the file
could lie (another process's put, a rewrite, time travel, a torn or foreign file, a ref moved
by plain git) must give what git gives."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import helpers
import pytest
from helpers import make_state, run_git

from qvc import CheckpointConfig, GitCheckpointStore
from qvc.store.summaries import MAGIC, THREADS, parse


def put_many(store, thread, n, start=0, prefix="c"):
    for step in range(start, start + n):
        helpers.put(store, thread, f"{prefix}{step:04d}", step, make_state(thread, f"{prefix}{step}", step))


def listing(store, thread="t", **kw):
    return [tuple(t) for t in store.list(CheckpointConfig(thread), **kw)]


def truth(path, thread="t", **kw):
    """The list as git alone gives it: a read-only store after the summary files are removed."""
    shutil.rmtree(os.path.join(path, THREADS), ignore_errors=True)
    with GitCheckpointStore(path, readonly=True) as store:
        return listing(store, thread, **kw)


def summary_file(path, thread="t"):
    return os.path.join(path, THREADS, thread)


def held(path, thread="t"):
    with open(summary_file(path, thread), "rb") as f:
        data = f.read()
    assert data.startswith(MAGIC)
    found, blobs, used, whole = parse(data[len(MAGIC):])
    return {s.sha for s in found}, whole


def test_a_cold_list_reads_the_file_not_the_commits(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 70)
        first = listing(store)
    shas, whole = held(path)
    assert whole and len(shas) == 70
    with GitCheckpointStore(path) as store:
        assert listing(store) == first
        assert len(store.history._commits) == 0  # no commit was read from git
    assert listing_equal_to_truth(path, first)


def listing_equal_to_truth(path, got, thread="t"):
    return got == truth(path, thread)


def test_another_process_appends_and_the_list_follows(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 5)
        assert len(listing(store)) == 5
        code = textwrap.dedent(f"""
            import helpers
            from qvc import GitCheckpointStore
            from helpers import make_state
            with GitCheckpointStore({path!r}) as s:
                for step in range(5, 9):
                    helpers.put(s, "t", f"c{{step:04d}}", step, make_state("t", f"c{{step}}", step))
                assert len(list(s.list(helpers.CheckpointConfig("t")))) == 9
        """)
        env = helpers.child_env()
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(helpers.__file__), env.get("PYTHONPATH", "")])
        subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
        got = listing(store)
    assert [t[0].checkpoint_id for t in got] == [f"c{s:04d}" for s in range(8, -1, -1)]
    assert held(path)[0] >= {store_sha for store_sha in _shas(path)}
    assert got == truth(path)


def _shas(path, thread="t"):
    with GitCheckpointStore(path, readonly=True) as store:
        return [i.hex for i in store.first_parents(store.head(thread))]


def test_delete_rename_and_prune_rewrite_what_is_listed(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 6)
        listing(store)
        store.delete(CheckpointConfig("t", "c0002"))
        got = listing(store)
        assert [t[0].checkpoint_id for t in got] == ["c0005", "c0004", "c0003", "c0001", "c0000"]
        assert got[2][3].checkpoint_id == "c0001"  # re-parented
    assert got == truth(path)
    with GitCheckpointStore(path) as store:
        assert listing(store) == got
        store.rename_thread("t", "u")
        assert listing(store) == []
        renamed = listing(store, "u")
        assert [t[1].thread_id for t in renamed] == ["u"] * 5
        store.prune_thread("u")
        assert [t[0].checkpoint_id for t in listing(store, "u")] == ["c0005"]
    assert [t[0].checkpoint_id for t in truth(path, "u")] == ["c0005"]


def test_time_travel_lists_the_new_line_and_keeps_the_old(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 5)
        listing(store)
        head = store.head("t")
        helpers.put(store, "t", "x0003", 3, {"x": 1}, parent_id="c0002", expected_head=head)
        got = listing(store)
        both = listing(store, superseded=True)
    assert [t[0].checkpoint_id for t in got] == ["x0003", "c0002", "c0001", "c0000"]
    assert [t[0].checkpoint_id for t in both] == ["x0003", "c0002", "c0001", "c0000", "c0004", "c0003"]
    with GitCheckpointStore(path) as store:
        assert listing(store) == got
        assert listing(store, superseded=True) == both
    assert got == truth(path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "foreign", "empty"])
def test_a_torn_or_foreign_file_falls_back_to_git_and_is_rewritten(tmp_path, damage):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 12)
        first = listing(store)
    name = summary_file(path)
    data = open(name, "rb").read()
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data = data[:len(data) // 2] + b"\0" * 64 + data[len(data) // 2:]
    elif damage == "flip":
        at = len(data) // 3
        data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    elif damage == "foreign":
        data = b"qvc-summaries 99\n" + data[len(MAGIC):]
    else:
        data = b""
    with open(name, "wb") as f:
        f.write(data)
    with GitCheckpointStore(path, readonly=True) as store:
        assert listing(store) == first
    assert open(name, "rb").read() == data  # a read-only store never writes it
    with GitCheckpointStore(path) as store:
        assert listing(store) == first
    shas, whole = held(path)
    assert whole and len(shas) == 12  # rewritten whole
    with GitCheckpointStore(path) as store:
        assert listing(store) == first


def test_a_ref_moved_by_git_fetch_is_followed(tmp_path):
    path, other = str(tmp_path / "r.qvc"), str(tmp_path / "o.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 4)
        listing(store)
    with GitCheckpointStore(other) as store:
        put_many(store, "t", 6, prefix="o")
    run_git(path, "fetch", "--quiet", other, "+refs/heads/t:refs/heads/t")
    with GitCheckpointStore(path) as store:
        got = listing(store)
    assert [t[0].checkpoint_id for t in got] == [f"o{s:04d}" for s in range(5, -1, -1)]
    assert got == truth(path)
    run_git(path, "update-ref", "refs/heads/t", _shas(path)[3])  # plain git moves the head back
    with GitCheckpointStore(path) as store:
        assert [t[0].checkpoint_id for t in listing(store)] == ["o0002", "o0001", "o0000"]


def test_read_only_stores_use_the_file_but_never_create_it(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 3)
    with GitCheckpointStore(path, readonly=True) as store:
        got = listing(store)
    assert not os.path.exists(os.path.join(path, THREADS))
    with GitCheckpointStore(path) as store:
        assert listing(store) == got
    assert os.path.exists(summary_file(path))
    with GitCheckpointStore(path, readonly=True) as store:
        assert listing(store) == got
        assert len(store.history._commits) == 0


def test_limit_and_before_still_cut_the_line(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 8)
        listing(store, limit=2)
    with GitCheckpointStore(path) as store:
        assert [t[0].checkpoint_id for t in listing(store, limit=3)] == ["c0007", "c0006", "c0005"]
        assert [t[0].checkpoint_id for t in listing(store, before="c0003", limit=2)] == ["c0002", "c0001"]
        assert listing(store) == truth(path)


def test_small_field_blobs_come_from_the_file_too(tmp_path):
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        for step in range(20):
            helpers.put(store, "t", f"c{step:04d}", step, {"n": step, "text": "x" * (step % 4), "big": "y" * 20000,
                                                          "items": [step, {"k": [1, 2]}]})
        first = listing(store)
    with GitCheckpointStore(path) as store:
        assert listing(store) == first
        read = set(store.history._blobs)  # read from git: only the one blob too large to inline
        assert len(read) == 1 and len(store.history.blob(read.pop())) > 20000
        again = listing(store)
        assert again == first
        again[0][1].state_data["items"][1]["k"].append(3)  # a caller changing what it got ...
        assert listing(store) == first  # ... changes nothing another read returns


def test_processes_listing_while_another_puts_agree_with_git(tmp_path):
    """Several processes list (and so append to the same file) while another puts: every list
    is a prefix-closed line of what was put, and afterwards the file and git agree."""
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 3)
    lister = textwrap.dedent(f"""
        from qvc import CheckpointConfig, GitCheckpointStore
        for _ in range(25):
            with GitCheckpointStore({path!r}) as s:
                got = [t.checkpoint.id for t in s.list(CheckpointConfig("t"))]
            assert got == [f"c{{n:04d}}" for n in range(len(got) - 1, -1, -1)], got
    """)
    putter = textwrap.dedent(f"""
        import helpers
        from helpers import make_state
        from qvc import GitCheckpointStore
        with GitCheckpointStore({path!r}) as s:
            for step in range(3, 40):
                helpers.put(s, "t", f"c{{step:04d}}", step, make_state("t", f"c{{step}}", step))
    """)
    env = helpers.child_env()
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(helpers.__file__), env.get("PYTHONPATH", "")])
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for code in (putter, lister, lister, lister)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    with GitCheckpointStore(path) as store:
        got = listing(store)
    assert len(got) == 40
    shas, whole = held(path)
    assert whole and shas >= set(_shas(path))
    assert got == truth(path)


def test_read_and_fsck_see_damage_the_summary_files_would_hide(tmp_path):
    """``read`` (what fsck and damage reports use) reads git's objects, never the files' copies."""
    from pathlib import Path

    from qvc.readers.fsck import fsck

    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as store:
        put_many(store, "t", 3)
        first = listing(store)
    sha = _shas(path)[0]
    blob = run_git(path, "rev-parse", f"{sha}:score").stdout.strip()
    repo = Path(path)
    for pack in list((repo / "objects" / "pack").glob("*.pack")):
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        run_git(path, "unpack-objects", "-q", input=data, text=False)
    obj = repo / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"not zlib at all")
    with GitCheckpointStore(path) as store:
        assert listing(store) == first  # the file's copy of the blob: the value as it was stored
        damaged: dict = {}
        store.read(sha, damaged=damaged)
        assert set(damaged) == {"score"}
        report = fsck(store)
        assert any("'score'" in p for p in report.problems), report.problems


def test_a_list_that_straddles_a_delete_and_purge_writes_nothing_back(tmp_path):
    """A list walks the refs it read when it began; if a delete (then a purge) ran meanwhile, what
    it walked may be what they removed, and must not reach the summary file after the purge."""
    path = str(tmp_path / "r.qvc")
    with GitCheckpointStore(path) as writer:
        put_many(writer, "t", 3)
    with GitCheckpointStore(path) as lister, GitCheckpointStore(path) as deleter:
        walk = lister.list(CheckpointConfig("t"))
        assert [next(walk).checkpoint.id for _ in range(3)] == ["c0002", "c0001", "c0000"]  # not saved yet
        deleter.delete_thread("t")
        deleter.purge()
        assert list(walk) == []  # the walk ends: its save finds the generation replaced
        assert not os.path.exists(summary_file(path))
        assert listing(lister) == []
    with GitCheckpointStore(path) as store:  # an ordinary list still writes the file
        put_many(store, "u", 2)
    with GitCheckpointStore(path) as store:
        assert len(listing(store, "u")) == 2
    assert os.path.exists(summary_file(path, "u"))
