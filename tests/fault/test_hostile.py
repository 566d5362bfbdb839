"""Hostile input: a repository that asks to run programs, crafted trees, huge values,
corrupted files through the command line.

- A repository whose config and hooks ask git to run programs (hooks, ``core.hooksPath``,
  ``core.fsmonitor``, clean/smudge/process filters and textconv in ``info/attributes``, pager,
  editor, ssh, ``uploadpack.packObjectsHook``, ``gc.auto``, an included config file): every
  library operation and CLI command qvc has runs on it, and no program ever runs (each would
  leave a marker file).
- ``qvc checkout --to DIR`` of a checkpoint whose tree a hostile tool crafted with field names
  ``../x``, absolute paths, ``..``, ``.``, a NUL, a slash: nothing is written outside DIR.
- Huge values: a 100 MB field and a 1,000,000-element list round-trip in a subprocess whose
  peak memory stays within a bounded multiple of the value's size.
- Truncated, zero-length and garbage objects and refs through the CLI: one line on stderr,
  exit code 5 (corruption) or 3 (not found), no traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from helpers import child_env, put, run_git
from traps import HOOKS, PROGRAM_KEYS, arm

from qvc import CheckpointConfig, GitCheckpointStore, fork_checkpoint
from qvc.codec import serde
from qvc.errors import InvalidInputError
from qvc.readers.fsck import fsck as qvc_fsck
from qvc.runs import Runs


def qvc_cli(repo: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo), *args], capture_output=True, text=True,
                          env={**child_env(), "PAGER": "cat", "EDITOR": "true", "GIT_PAGER": "cat"},
                          timeout=120, cwd=cwd, stdin=subprocess.DEVNULL)


def test_a_repository_never_makes_qvc_run_a_program(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "a", state={"messages": ["hi"], "n": 1})
    markers = tmp_path / "markers"
    made = arm(repo, markers)
    assert len(made) >= 2 * len(HOOKS) + len(PROGRAM_KEYS)
    # the scripts do work when something runs them
    subprocess.run([str(made[0])], check=True, input=b"")
    assert os.listdir(markers)
    for m in markers.iterdir():
        m.unlink()

    with GitCheckpointStore(repo) as store:
        put(store, "t", "b", state={"messages": ["hi", "there"], "n": 2})
        store.put_writes(CheckpointConfig("t", "b"), [("ch", 1)], "task")
        fork_checkpoint(store, CheckpointConfig("t", "a"), "f")
        store.reset("t", "a")
        put(store, "t", "c", state={"messages": ["again"], "n": 3})
        store.delete(CheckpointConfig("t"))
        runs = Runs(store)
        rec = runs.start("q", run_id="run1", session_id="s")
        rec.add_message({"role": "assistant", "content": "ok"})
        rec.complete("done")
        store.gc()
        qvc_fsck(store)  # runs git fsck itself
        store.purge()
    out = tmp_path / "out"
    commands = [
        ("log",), ("log", "--all", "--graph"), ("log", "--oneline", "-n", "5", "t"), ("show", "t"),
        ("diff", "t"), ("branch", "-v"), ("status",), ("reflog",), ("runs",), ("timeline", "run1"),
        ("fsck",), ("gc",), ("checkout", "t", "--to", str(out)), ("commit", str(out), "-m", "edit"),
        ("branch", "g", "t"), ("reset", "t~1"), ("checkout", "t"), ("gc", "--prune"),
    ]
    for args in commands:
        proc = qvc_cli(repo, *args)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        if args[0] == "checkout" and "--to" in args:
            assert proc.returncode == 0, (args, proc.stderr)
    ran = sorted(os.listdir(markers))
    assert not ran, f"qvc made git run programs the repository asked for: {ran}"


def _raw_tree(entries: list[tuple[bytes, str]], git_dir: Path) -> str:
    """Write a tree object with arbitrary raw entry names (what a hostile tool can do)."""
    data = b"".join(b"100644 " + name + b"\0" + bytes.fromhex(oid) for name, oid in entries)
    return run_git(git_dir, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", input=data,
                   text=False).stdout.decode().strip()


@pytest.mark.parametrize("name", [b"../escape", b"../../escape", b"/tmp/qvc-escape-abs", b"..", b".",
                                  b"a/../../escape", b"sub/escape", b"nul\0escape", b"", b"\\..\\escape"])
@pytest.mark.parametrize("drop_versions", [False, True])
def test_checkout_to_dir_of_a_crafted_tree_writes_nothing_outside(tmp_path, name, drop_versions):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "a", state={"ok": 1, "escape": 2})
        head = store.head("t")
    tree_line = run_git(repo, "cat-file", "-p", head).stdout.splitlines()[0]
    good_tree = tree_line.split()[1]
    entries = [line.split("\t") for line in run_git(repo, "ls-tree", good_tree).stdout.splitlines()]
    blob = next(meta.split()[2] for meta, fname in entries if "escape" in fname)
    raw = [(fname.encode(), meta.split()[2]) for meta, fname in entries if "escape" not in fname]
    raw.append((name, blob))
    if drop_versions:  # without the recorded versions, the reader gets as far as writing files
        i = next(i for i, (n, _) in enumerate(raw) if n == b".qvc")
        header = serde.loads(run_git(repo, "cat-file", "blob", raw[i][1], text=False).stdout)
        header["checkpoint"].pop("versions", None)
        raw[i] = (b".qvc", run_git(repo, "hash-object", "-w", "--stdin", input=serde.dumps(header),
                                   text=False).stdout.decode().strip())
    raw.sort(key=lambda e: e[0])
    bad_tree = _raw_tree(raw, repo)
    commit_text = run_git(repo, "cat-file", "commit", head, text=False).stdout
    crafted = commit_text.replace(f"tree {good_tree}".encode(), f"tree {bad_tree}".encode(), 1)
    sha = run_git(repo, "hash-object", "-t", "commit", "--literally", "-w", "--stdin", input=crafted,
                  text=False).stdout.decode().strip()
    run_git(repo, "update-ref", "refs/heads/t", sha)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out"
    before = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("qvc-escape*"))
    proc = qvc_cli(repo, "checkout", "t", "--to", str(out), cwd=work)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2, 3, 5), proc.stderr
    if proc.returncode:
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    after = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("qvc-escape*"))
    new_outside = [p for p in after - before if out not in p.parents and p != out]
    assert not new_outside, f"written outside DIR: {new_outside}"


HUGE = r"""
import resource, sys, time
from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore
kind, path = sys.argv[1], sys.argv[2]
value = b"x" * (100 * 2**20) if kind == "field" else list(range(1_000_000))
size = len(value) if kind == "field" else 8 * len(value)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
with GitCheckpointStore(path) as store:
    t0 = time.monotonic()
    store.put(CheckpointConfig("t"), Checkpoint(id="big", thread_id="t", step=0, state_data={"v": value}), {})
    back = store.get_tuple(CheckpointConfig("t")).checkpoint.state_data["v"]
    assert back == value, "value changed"
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(size, base, peak, round(time.monotonic() - t0, 2))
"""


@pytest.mark.parametrize("kind", ["field", "list"])
def test_huge_values_round_trip_with_bounded_memory(tmp_path, kind):
    proc = subprocess.run([sys.executable, "-c", HUGE, kind, str(tmp_path / "r.qvc")], capture_output=True,
                          text=True, env=child_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    size, base, peak, took = proc.stdout.split()
    grown = int(peak) - int(base)
    print(f"\n{kind}: {int(size) >> 20} MiB value, peak RSS grew by {grown >> 20} MiB in {took} s")
    assert grown < 12 * int(size) + (64 << 20), f"peak RSS grew by {grown >> 20} MiB ({int(size) >> 20} MiB value)"
    run_git(tmp_path / "r.qvc", "fsck", "--strict")


def _damage(repo: Path, how: str) -> None:
    packs = sorted((repo / "objects" / "pack").glob("*.pack"))
    if how == "truncate-pack":
        for p in packs:
            os.chmod(p, 0o644)
            data = p.read_bytes()
            p.write_bytes(data[: len(data) // 2])
    elif how == "zero-pack":
        for p in packs:
            os.chmod(p, 0o644)
            p.write_bytes(b"")
    elif how == "garbage-loose":
        # explode the packs into loose objects, then damage every blob
        for p in packs:
            data = p.read_bytes()
            for ext in (".pack", ".idx"):
                os.chmod(p.with_suffix(ext), 0o644)
                p.with_suffix(ext).unlink()
            run_git(repo, "unpack-objects", "-q", input=data, text=False)
        for obj in (repo / "objects").glob("??/*"):
            kind = run_git(repo, "cat-file", "-t", obj.parent.name + obj.name).stdout.strip()
            if kind == "blob":
                os.chmod(obj, 0o644)
                obj.write_bytes(zlib.compress(b"blob 3\0abc")[:7])
    elif how == "empty-ref":
        (repo / "refs" / "heads" / "t").write_bytes(b"")
    elif how == "garbage-ref":
        (repo / "refs" / "heads" / "t").write_bytes(b"not a sha at all\n")
    elif how == "dangling-ref":
        (repo / "refs" / "heads" / "t").write_text("1" * 40 + "\n")


@pytest.mark.parametrize("how", ["truncate-pack", "zero-pack", "garbage-loose", "empty-ref", "garbage-ref",
                                 "dangling-ref"])
def test_corrupted_repository_through_the_cli(tmp_path, how):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "a", state={"messages": ["hello"] * 10, "n": 1})
        put(store, "t", "b", state={"messages": ["hello"] * 11, "n": 2})
    _damage(repo, how)
    outcomes: dict[int, int] = {}
    for args in (("show", "t"), ("log", "t"), ("diff", "t"), ("fsck",), ("checkout", "t", "--to",
                                                                          str(tmp_path / "o"))):
        proc = qvc_cli(repo, *args)
        assert "Traceback" not in proc.stderr, (how, args, proc.stderr)
        if args[0] == "fsck":  # its report: one "error: ..." line per problem, exit 5
            assert proc.returncode == 5 and proc.stderr.startswith("error: "), (how, proc.returncode, proc.stderr)
            continue
        # log reads commits only: damaged blobs do not stop it
        assert proc.returncode in ((0, 3, 5) if args[0] == "log" else (3, 5)), (
            how, args, proc.returncode, proc.stdout[-500:], proc.stderr)
        if proc.returncode:
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("qvc: "), (how, args, proc.stderr)
        outcomes[proc.returncode] = outcomes.get(proc.returncode, 0) + 1
    print(f"\n{how}: exit codes {outcomes}")


@pytest.mark.parametrize("thread", ["-n", "--all", "HEAD", "t~1", "a..b", "x@{1}", "@", "con", "a b\tc",
                                    "ünïcödé-☃", "refs/heads/x", "a/b/../c", "\u202eevil", "x" * 300, "a:b", "*?[",
                                    ".hidden", "trailing."])
def test_awkward_thread_ids_through_the_library_and_cli(tmp_path, thread):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, thread, "c-1", state={"v": thread})
        put(store, thread, "c/../2", state={"v": thread + "2"})
        assert [t.checkpoint.id for t in store.list(CheckpointConfig(thread))] == ["c/../2", "c-1"]
        assert thread in store.threads()
        runs = Runs(store)
        if "/" in thread or "@" in thread:  # documented: run ids name files and revisions
            with pytest.raises(InvalidInputError):
                runs.start("q", run_id=thread, session_id="s")
        else:
            rec = runs.start("q", run_id=thread, session_id=thread)
            rec.complete("done")
            assert runs.get(thread).run_id == thread
    proc = qvc_cli(repo, "log", "--", thread) if not thread.startswith("-") else qvc_cli(repo, "branch", "-v")
    assert "Traceback" not in proc.stderr, proc.stderr
    proc = qvc_cli(repo, "fsck")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_git(repo, "fsck", "--strict")
