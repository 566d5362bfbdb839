"""A damaged part of a repository costs only what it damages (issue 32, item 1), through ``qvc``
as a real process.

A ref file that holds no ref costs only its thread.
Garbage text in a thread's ref file (the current thread's or another's), or a file another
program left under ``refs/heads/``: ``status``, ``branch``, ``log --all`` and ``fsck`` go on and
name it in one line; creating and deleting other threads works; checking it out is refused in
one line that names the repair; and the repair works: ``qvc fsck --repair`` moves the file
aside into the quarantine folder and restores the ref from its reflog (``qvc reset
THREAD@{1}`` puts it back too), saying so in one line. A config file that does not parse is
named as such, not as "not a qvc repository".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import fsck, put, qvc, qvc_json, run_git

from qvc import GitCheckpointStore


@pytest.fixture
def work(tmp_path) -> Path:
    """``tmp_path/work/.qvc``: threads main (3 checkpoints, HEAD) and side (2)."""
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"n": i})
        for i in range(2):
            put(store, "side", f"s{i}", i, {"n": 10 + i})
        store.checkout("main")
    return tmp_path / "work"


def garble(work: Path, name: str, data: bytes = b"garbage\n") -> None:
    """Write ``data`` (no ref) as the file of ``refs/heads/<name>``."""
    (work / ".qvc" / "refs" / "heads" / name).write_bytes(data)


def warnings_of(proc) -> list[str]:
    lines = proc.stderr.splitlines()
    assert all(ln.startswith("qvc: warning: ") for ln in lines), proc.stderr
    return lines


def quarantined(work: Path, name: str) -> list[Path]:
    """The files ``refs/heads/<name>`` that repairs moved into the quarantine folders."""
    return sorted((work / ".qvc" / "qvc" / "quarantine").glob(f"*/refs/heads/{name}"))


def test_garbage_in_the_current_threads_ref_costs_only_that_thread(work):
    garble(work, "main")
    proc = qvc("status", cwd=work)
    assert [ln for ln in warnings_of(proc) if "'main'" in ln and "qvc fsck --repair" in ln], proc.stderr
    assert "On thread main (damaged)" in proc.stdout
    st = qvc_json("status", cwd=work)
    assert st["thread"] == "main" and st["head"] is None and "garbage" in st["damaged"]

    proc = qvc("branch", cwd=work)
    assert len(warnings_of(proc)) == 1 and "'main'" in proc.stderr
    assert proc.stdout.split() == ["side"]
    assert [r["thread"] for r in qvc_json("branch", "-v", cwd=work)] == ["side"]

    proc = qvc("log", "--all", "--json", cwd=work)
    assert len(warnings_of(proc)) == 1 and "'main'" in proc.stderr
    assert {e["id"] for e in json.loads(proc.stdout)} == {"s0", "s1"}

    proc = qvc("fsck", cwd=work, check=5)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: thread 'main'")]
    assert len(ours) == 1 and "qvc fsck --repair" in ours[0], proc.stderr
    report = json.loads(qvc("fsck", "--json", cwd=work, check=5).stdout)
    assert report["refs"] == 2 and report["checkpoints"] == 2  # side's line was checked

    side = run_git(work / ".qvc", "rev-parse", "side").stdout.strip()
    assert "Forked thread 'fork'" in qvc("branch", "fork", side, cwd=work).stdout
    assert "Deleted thread fork" in qvc("branch", "-D", "fork", cwd=work).stdout
    proc = qvc("branch", "-D", "main", cwd=work, check=5)
    assert proc.stderr.splitlines()[-1].endswith("(repair: `qvc fsck --repair`)")

    proc = qvc("checkout", "main", cwd=work, check=5)  # no traceback (asserted by qvc()), one line
    assert proc.stderr.count("\n") == 1 and "qvc fsck --repair" in proc.stderr


def test_checking_out_a_thread_whose_ref_is_garbage_is_refused_in_one_line(work):
    garble(work, "main")
    qvc("checkout", "side", cwd=work)
    proc = qvc("checkout", "main", cwd=work, check=5)
    assert proc.stderr.count("\n") == 1 and "thread 'main' is damaged" in proc.stderr
    assert qvc_json("status", cwd=work)["thread"] == "side"  # HEAD stayed where it was


def test_fsck_repair_moves_the_file_aside_and_restores_the_ref_from_its_reflog(work):
    garble(work, "main")
    proc = qvc("fsck", "--repair", cwd=work)
    repaired = [ln for ln in proc.stdout.splitlines() if ln.startswith("repaired: ")]
    assert len(repaired) == 1, proc.stdout
    assert "restored ref(s) refs/heads/main from its reflog" in repaired[0]
    assert "moved aside to qvc/quarantine/" in repaired[0]
    [aside] = quarantined(work, "main")
    assert aside.read_bytes() == b"garbage\n"
    st = qvc_json("status", cwd=work)
    assert (st["thread"], st["head_id"], st["damaged"]) == ("main", "m2", None)
    assert qvc("branch", cwd=work).stderr == ""
    assert qvc_json("fsck", cwd=work)["ok"] is True
    assert "repaired" not in qvc("fsck", "--repair", cwd=work).stdout  # nothing left to repair
    fsck(work / ".qvc")


def test_reset_to_the_reflog_puts_back_a_current_thread_whose_ref_is_garbage(work):
    garble(work, "main")
    proc = qvc("reset", "main@{1}", cwd=work)
    assert "HEAD is now at m1" in proc.stdout and "the previous line is kept" in proc.stdout
    assert len(warnings_of(proc)) == 1 and "moved aside to qvc/quarantine/" in proc.stderr
    assert "restored ref(s) refs/heads/main from its reflog" in proc.stderr
    assert quarantined(work, "main")
    assert qvc_json("status", cwd=work)["head_id"] == "m1"
    # the head the garbage hid (m2) is kept as every reset keeps a line: log --all shows it, and
    # gc --prune (which expires reflogs) does not take it
    assert "m2" in {e["id"] for e in qvc_json("log", "--all", cwd=work)}
    qvc("gc", "--prune", cwd=work)
    assert "m2" in {e["id"] for e in qvc_json("log", "--all", cwd=work)}
    fsck(work / ".qvc")


def test_garbage_in_another_threads_ref_and_a_junk_file_under_refs_heads(work):
    garble(work, "side")
    garble(work, "junk.txt", b"\x00\x01 not a sha")
    proc = qvc("status", cwd=work)
    assert {"'side'", "'junk.txt'"} <= {w for ln in warnings_of(proc) for w in ("'side'", "'junk.txt'") if w in ln}
    assert "head m2" in proc.stdout
    proc = qvc("branch", cwd=work)
    assert len(warnings_of(proc)) == 2 and proc.stdout.split() == ["*", "main"]
    proc = qvc("log", "--all", "--json", cwd=work)
    assert len(warnings_of(proc)) == 2
    assert {e["id"] for e in json.loads(proc.stdout)} == {"m0", "m1", "m2"}

    report = json.loads(qvc("fsck", "--json", cwd=work, check=5).stdout)
    assert report["refs"] == 3 and report["checkpoints"] == 3  # main's line checked, both bad refs named
    named = [p for p in report["problems"] if not p.startswith("git fsck")]
    assert len(named) == 2 and any("'side'" in p for p in named) and any("junk.txt" in p for p in named)

    proc = qvc("branch", "-D", "junk.txt", cwd=work, check=5)
    assert proc.stderr.count("\n") == 1 and "qvc fsck --repair" in proc.stderr

    proc = qvc("fsck", "--repair", cwd=work)
    assert "restored ref(s) refs/heads/side from its reflog" in proc.stdout
    assert "removed ref(s) refs/heads/junk.txt" in proc.stdout
    assert quarantined(work, "side") and quarantined(work, "junk.txt")
    assert [r["thread"] for r in qvc_json("branch", cwd=work)] == ["main", "side"]
    assert qvc_json("show", "side", cwd=work)["id"] == "s1"
    fsck(work / ".qvc")


def test_a_config_that_does_not_parse_is_named_by_a_write(work):
    config = work / ".qvc" / "config"
    config.write_text("garbage [[\n")
    proc = qvc("branch", "x", "main", cwd=work, check=5)
    assert proc.stderr.count("\n") == 1 and "not a qvc repository" not in proc.stderr
    assert proc.stderr.startswith(f"qvc: {config}: config unreadable"), proc.stderr
    assert qvc_json("log", "-n", "1", cwd=work)[0]["id"] == "m2"  # reads do not need it


def test_a_truncated_pack_is_named_by_status_and_the_hint_that_repairs_it_works(work, tmp_path):
    server = tmp_path / "server.git"
    run_git(None, "init", "-q", "--bare", str(server))
    qvc("remote", "add", "origin", str(server), cwd=work)
    qvc("push", "origin", cwd=work)
    [pack] = (work / ".qvc" / "objects" / "pack").glob("*.pack")
    pack.chmod(0o644)
    with open(pack, "r+b") as f:
        f.truncate(pack.stat().st_size // 2)

    proc = qvc("status", cwd=work)
    named = [ln for ln in warnings_of(proc) if ln.startswith(f"qvc: warning: pack objects/pack/{pack.name}")]
    assert len(named) == 1 and "`qvc fetch --refetch REMOTE` then `qvc gc`" in named[0], proc.stderr
    assert pack.name in " ".join(qvc_json("status", cwd=work)["problems"])
    hints = warnings_of(qvc("branch", "-v", cwd=work))
    assert hints and all("`qvc fetch --refetch REMOTE` then `qvc gc`" in ln for ln in hints), hints

    qvc("fetch", "--refetch", "origin", cwd=work)  # what the hint says
    qvc("gc", cwd=work)
    proc = qvc("status", cwd=work)
    assert not [ln for ln in proc.stderr.splitlines() if "damaged" in ln], proc.stderr
    assert qvc_json("status", cwd=work)["head_id"] == "m2"
    assert qvc_json("fsck", cwd=work)["ok"] is True
