"""Damage stays where it is (issue 15, part C), through the ``qvc`` command as a real process.

A ref pointing at a missing object hides only its thread: the other threads stay readable
(exit 0, a warning naming the broken thread), ``branch -D`` removes it and ``fsck`` names it. A
corrupt field blob hides only that field: ``show`` marks it, healthy fields stay readable
(``--field``, ``diff``, ``checkout --to``), ``fsck`` names thread, checkpoint and field and
counts every checkpoint.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from helpers import child_env, fsck, put, qvc, qvc_json, run_git  # noqa: E402

from qvc import GitCheckpointStore  # noqa: E402

MISSING = "1234567890abcdef1234567890abcdef12345678"


@pytest.fixture
def work(tmp_path) -> Path:
    """``tmp_path/work/.qvc``: threads main (3 checkpoints, HEAD), side (2) and broken (1)."""
    with GitCheckpointStore(tmp_path / "work" / ".qvc") as store:
        for i in range(3):
            put(store, "main", f"m{i}", i, {"plan": [f"p{k}" for k in range(i + 1)], "n": i})
        for i in range(2):
            put(store, "side", f"s{i}", i, {"n": 10 + i})
        put(store, "broken", "b0", 0, {"n": 99})
        store.checkout("main")
    return tmp_path / "work"


def break_ref(work: Path, thread: str = "broken") -> None:
    """Point the thread's ref at an object that does not exist (as a lost object or a bad tool leaves it)."""
    ref = work / ".qvc" / "refs" / "heads" / thread
    assert ref.is_file()
    ref.write_text(MISSING + "\n")


def corrupt_blob(work: Path, rev: str) -> str:
    """Overwrite the (loose, after exploding the packs) blob of ``rev`` with garbage; its id."""
    repo = work / ".qvc"
    blob = run_git(repo, "rev-parse", rev).stdout.strip()
    for pack in list((repo / "objects" / "pack").glob("*.pack")):
        data = pack.read_bytes()
        pack.unlink()
        pack.with_suffix(".idx").unlink()
        run_git(repo, "unpack-objects", "-q", input=data, text=False)
    obj = repo / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"not zlib at all")
    return blob


def warned(proc, thread: str) -> None:
    lines = proc.stderr.splitlines()
    assert lines and all(ln.startswith("qvc: warning: ") for ln in lines), proc.stderr
    assert any(f"thread {thread!r}" in ln for ln in lines), proc.stderr


# -- a broken ref ---------------------------------------------------------------------------------


def test_a_broken_ref_hides_only_its_thread(work):
    break_ref(work)
    assert qvc_json("status", cwd=work)["thread"] == "main"
    proc = qvc("branch", "-v", cwd=work)
    warned(proc, "broken")
    assert [ln.split()[1] if ln.startswith("*") else ln.split()[0] for ln in proc.stdout.splitlines()] == \
        ["main", "side"]
    rows = json.loads(qvc("branch", "-v", "--json", cwd=work).stdout)
    assert [r["thread"] for r in rows] == ["main", "side"]
    proc = qvc("log", "--all", "--json", cwd=work)
    warned(proc, "broken")
    assert {e["id"] for e in json.loads(proc.stdout)} == {"m0", "m1", "m2", "s0", "s1"}
    assert qvc_json("log", "side", cwd=work)[0]["id"] == "s1"
    assert "m2" in qvc("show", "main", cwd=work).stdout


def test_status_on_a_broken_current_thread(work):
    break_ref(work, "main")
    proc = qvc("status", cwd=work)
    warned(proc, "main")
    assert "(damaged)" in proc.stdout
    st = json.loads(qvc("status", "--json", cwd=work).stdout)
    assert st["thread"] == "main" and st["head"] == MISSING and MISSING in st["damaged"]
    assert st["threads"] == 3


def test_fsck_names_the_broken_thread_and_branch_D_removes_it(work):
    break_ref(work)
    proc = qvc("fsck", cwd=work, check=5)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: thread")]
    assert ours and "thread 'broken' (refs/heads/broken)" in ours[0] and MISSING in ours[0], proc.stderr
    report = json.loads(qvc("fsck", "--json", cwd=work, check=5).stdout)
    assert report["checkpoints"] == 5
    proc = qvc("branch", "-d", "broken", cwd=work, check=5)
    assert "use -D" in proc.stderr and proc.stderr.count("\n") == 1
    proc = qvc("branch", "-D", "broken", cwd=work)
    assert "Deleted thread broken" in proc.stdout and "damaged" in proc.stdout
    assert [r["thread"] for r in qvc_json("branch", cwd=work)] == ["main", "side"]
    assert qvc("branch", "-v", cwd=work).stderr == ""
    assert qvc_json("fsck", cwd=work)["ok"] is True
    fsck(work / ".qvc")


# -- a corrupt field blob -------------------------------------------------------------------------


def test_a_corrupt_field_hides_only_that_field(work):
    corrupt_blob(work, "main~1:plan")
    proc = qvc("show", "main~1", cwd=work)
    assert "plan: DAMAGED" in proc.stdout and "n (v2): 1" in proc.stdout
    assert "State (2 fields)" in proc.stdout
    assert "n (v2): 1" in qvc("show", "main~1", "--field", "n", cwd=work).stdout
    proc = qvc("show", "main~1", "--field", "plan", cwd=work, check=5)
    assert proc.stderr.startswith("qvc: ") and proc.stderr.count("\n") == 1
    data = qvc_json("show", "main~1", cwd=work)
    assert data["state"] == {"n": 1} and set(data["damaged"]) == {"plan"}
    assert qvc_json("show", "main~1", "--field", "n", cwd=work)["state"] == {"n": 1}
    assert "damaged" not in qvc_json("show", "main", cwd=work)  # a healthy checkpoint: the usual form


def test_diff_and_checkout_to_of_a_checkpoint_with_a_corrupt_field(work):
    corrupt_blob(work, "main~1:plan")
    proc = qvc("diff", "main~1", "--json", cwd=work)
    assert [d["field"] for d in json.loads(proc.stdout)] == ["n"]
    assert "field 'plan' not compared" in proc.stderr and proc.stderr.startswith("qvc: warning: ")
    proc = qvc("diff", "main~2", "main", "--json", cwd=work)  # the damaged blob is not on either side
    assert {d["field"] for d in json.loads(proc.stdout)} == {"n", "plan"} and proc.stderr == ""
    proc = qvc("checkout", "main~1", "--to", "st", "--json", cwd=work)
    assert json.loads(proc.stdout)["files"] == ["n.json"]
    assert "field 'plan' is damaged and was not written" in proc.stderr
    assert json.loads((work / "st" / "n.json").read_text()) == 1


def test_fsck_names_the_damaged_field_and_counts_every_checkpoint(work):
    corrupt_blob(work, "main~1:plan")
    total = len(qvc_json("log", "--all", cwd=work))
    proc = qvc("fsck", cwd=work, check=5)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: thread")]
    assert len(ours) == 1, proc.stderr
    assert "thread 'main' checkpoint m1" in ours[0] and "field 'plan'" in ours[0], ours
    report = json.loads(qvc("fsck", "--json", cwd=work, check=5).stdout)
    assert report["checkpoints"] == total == 6


def test_the_server_lists_the_other_threads(work):
    break_ref(work)
    proc = subprocess.Popen([sys.executable, "-m", "qvc", "--repo", str(work / ".qvc"), "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(),
                            stdin=subprocess.DEVNULL)
    try:
        base = re.search(r"at (http://\S+?/)(?:\?token=\S+?)?[ ;]", proc.stdout.readline()).group(1)
        with urllib.request.urlopen(base + "api/threads", timeout=30) as resp:
            listing = json.loads(resp.read())
        assert [t["thread"] for t in listing["threads"]] == ["main", "side"]
        with urllib.request.urlopen(base + "api/repository", timeout=30) as resp:
            assert json.loads(resp.read())["thread"] == "main"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
