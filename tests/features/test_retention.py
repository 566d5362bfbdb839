"""Retention policies (qvc.store.retention, `qvc gc --keep-last ...`): what goes, what stays and
resumes, dry runs, disk given back, writers beside it, a policy killed midway."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import child_env, fsck, put, qvc, qvc_json, run_git, slow_enabled

from qvc import CheckpointConfig, GitCheckpointStore, InvalidInputError
from qvc.store.retention import Policies, Policy, parse_age
from qvc.types import PendingWrite

DAY = 86400.0


def fill(store, thread: str, n: int, *, start: int = 0, size: int = 0) -> list[str]:
    """``n`` checkpoints on ``thread`` with a transcript that grows by ``size`` bytes a step; their ids."""
    ids = []
    for step in range(start, start + n):
        cid = f"{thread}-{step:04d}"
        state = {"step": step, "transcript": [f"message {j} " + "x" * size for j in range(step + 1)]}
        put(store, thread, cid, step, state)
        ids.append(cid)
    return ids


def line_ids(store, thread: str) -> list[str]:
    return [t.checkpoint.id for t in store.list(CheckpointConfig(thread))]


def refs(path) -> str:
    return run_git(path, "for-each-ref", "--format=%(refname) %(objectname)").stdout


def test_keep_last_keeps_ids_states_versions_writes_and_tags(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        ids = fill(store, "a", 12)
        other = fill(store, "b", 3)
        store.put_writes(CheckpointConfig("a", ids[-1]), [PendingWrite("t1", "ch", {"v": 1})], "t1")
        store.put_writes(CheckpointConfig("a", ids[-3]), [PendingWrite("t2", "ch", 2)], "t2")
        store.put_writes(CheckpointConfig("a", ids[0]), [PendingWrite("t0", "ch", 0)], "t0")
        kept_before = {cid: store.get_tuple(CheckpointConfig("a", cid)) for cid in ids[-4:]}
        store.set_tag("release", store.resolve(ids[2]))
        report = store.retain(Policy(keep_last=4))
        assert [p.thread for p in report.threads] == ["a"]  # b has 3: nothing to remove
        assert report.removed == 7  # 12 - 4 kept - the tagged one
        assert line_ids(store, "a") == ids[-4:][::-1] + [ids[2]]
        assert line_ids(store, "b") == other[::-1]
        for cid, before in kept_before.items():
            after = store.get_tuple(CheckpointConfig("a", cid))
            assert after.checkpoint.state_data == before.checkpoint.state_data
            assert after.checkpoint.state_versions == before.checkpoint.state_versions
            assert after.pending_writes == before.pending_writes
        assert store.get_tuple(CheckpointConfig("a", ids[-1])).pending_writes == [PendingWrite("t1", "ch", {"v": 1})]
        assert store.get_tuple(CheckpointConfig("a", ids[3])) is None
        tagged = store.read(store.tag("release"))
        assert tagged.checkpoint.id == ids[2] and tagged.parent_config is None  # the tag followed its copy
        record = next(r for _, r in store.rewrites() if r["why"].startswith("retention"))
        assert {e["checkpoint_id"] for e in record["removed"]} == set(ids[:2] + ids[3:8])
    fsck(path)
    log = qvc("log", "a", cwd=path).stdout
    assert "Cut:     2 earlier checkpoint(s) removed" in log and "keep-last 4" in log
    assert qvc_json("log", "a", cwd=path)[-1]["cut"].startswith("2 earlier checkpoint(s) removed")
    # plain git: the old history is gone, the kept line is whole
    assert len(run_git(path, "rev-list", "refs/heads/a").stdout.split()) == 5
    assert run_git(path, "cat-file", "-t", "release").stdout.strip() == "commit"


def test_ages_ttl_keep_first_forks_and_superseded_lines(tmp_path):
    with GitCheckpointStore(tmp_path / "r.qvc") as store:
        ids = fill(store, "a", 10)
        from qvc import fork_checkpoint

        fork_checkpoint(store, CheckpointConfig("a", ids[5]), new_thread_id="fork")
        forked = line_ids(store, "fork")[0]
        fill(store, "fork", 6, start=6)
        store.reset("a", ids[7])  # ids[8:] become a superseded line
        fill(store, "a", 2, start=20)
        idle = fill(store, "idle", 3)
        later = time.time() + 40 * DAY
        # a dry run changes nothing, and says what would go
        before = {t: line_ids(store, t) for t in store.threads()}
        plan = store.retain(Policy(max_age=30 * DAY, keep_first=True, thread_ttl=35 * DAY), dry_run=True, now=later)
        assert {t: line_ids(store, t) for t in store.threads()} == before
        assert {p.thread: bool(p.delete) for p in plan.threads} == {"a": True, "fork": True, "idle": True}
        # max age with keep-first: the head and the first checkpoint of each line stay
        report = store.retain(Policy(max_age=30 * DAY, keep_first=True), now=later)
        assert line_ids(store, "a")[0] == "a-0021" and line_ids(store, "a")[-1] == ids[0]
        assert len(line_ids(store, "a")) == 2
        # a fork's first checkpoint is its own copy of the source's: kept, with the source behind it
        assert line_ids(store, "fork")[:3] == ["fork-0011", forked, ids[5]]
        assert line_ids(store, "idle") == [idle[-1], idle[0]]
        assert {p.thread for p in report.threads} == {"a", "fork", "idle"}
        # the superseded line: its own checkpoints stay until abandoned-after drops it
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("a"), superseded=True)][2:] == ids[8:][::-1]
        store.retain(Policy(abandoned_after=30 * DAY), now=later)
        assert [t.checkpoint.id for t in store.list(CheckpointConfig("a"), superseded=True)] == line_ids(store, "a")
        assert "fork" not in store.threads()  # a fork idle that long goes whole
        # a thread TTL deletes idle threads whole, others stay
        fill(store, "busy", 2)
        store.retain(Policy(thread_ttl=1 * DAY), now=time.time() + 2 * DAY - 60)
        assert sorted(store.threads()) == []
        fill(store, "busy", 1, start=5)
        store.retain(Policy(thread_ttl=1 * DAY))
        assert store.threads() == ["busy"]
    fsck(tmp_path / "r.qvc")


def test_policies_from_config_patterns_and_bad_settings(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for t in ("run/1", "keep/1", "x"):
            fill(store, t, 6)
        store.set_config("retention.keepLast", "4")
        store.set_config("retention.run/*.keepLast", "2")
        store.set_config("retention.keep/*.keepLast", "all")
        with pytest.raises(InvalidInputError, match="no count"):
            store.set_config("retention.keepLast", "lots")
        with pytest.raises(InvalidInputError, match="no age"):
            store.set_config("retention.maxAge", "3 days")
        with pytest.raises(InvalidInputError, match="no retention setting"):
            store.set_config("retention.keepLats", "3")
        policies = Policies.from_config(store.config())
        assert policies.for_thread("run/1") == Policy(keep_last=2)
        assert policies.for_thread("keep/1") == Policy()
        assert policies.with_call(Policy(keep_last=5)).for_thread("run/1") == Policy(keep_last=5)
    # `qvc gc` applies the configured policy; options win over it; a dry run changes nothing
    dry = qvc_json("gc", "--dry-run", cwd=path)
    assert {t["thread"]: t["removed"] for t in dry["threads"]} == {"run/1": 4, "x": 2}
    assert dry["predicted"] > 0
    out = qvc("gc", cwd=path).stdout
    assert "Removed 6 checkpoint(s) of 2 thread(s), then purged" in out
    with GitCheckpointStore(path) as store:
        assert [len(line_ids(store, t)) for t in ("run/1", "keep/1", "x")] == [2, 6, 4]
    assert qvc("gc", "--keep-last", "1", "--dry-run", cwd=path).stdout.count("would remove") == 3
    bad = qvc("gc", "--max-age", "soon", cwd=path, check=2)
    assert bad.stderr.strip() == "qvc: --max-age: 'soon' is no age (a number and one of s, m, h, d, w: 30d, 12h)"
    assert qvc("gc", "--keep-last", "0", cwd=path, check=2).stderr.count("\n") <= 3
    qvc("config", "retention.maxAge", "forever", cwd=path, check=2)
    assert parse_age("1.5h") == 5400


def test_a_dry_run_predicts_the_bytes_freed_within_ten_percent(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for t in range(6):
            fill(store, f"t{t}", 40, size=300)
        store.gc()
        before = refs(path)
        dry = store.retain(Policy(keep_last=5), dry_run=True)
        assert refs(path) == before
        report = store.retain(Policy(keep_last=5))
    freed = report.bytes_before - report.bytes_after
    assert freed > 0 and report.bytes_after < report.bytes_before / 2
    assert abs(dry.predicted - freed) <= 0.1 * freed, (dry.predicted, freed)
    assert sum(p.bytes for p in dry.threads) <= dry.predicted
    fsck(path)


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from helpers import put
    from qvc import GitCheckpointStore
    store = GitCheckpointStore(sys.argv[1])
    deadline = time.time() + float(sys.argv[2])
    step = 100
    while time.time() < deadline:
        for t in ("t0", "t1", "t2"):
            put(store, t, f"{{t}}-new-{{step}}", step, {{"step": step}})
            print(f"{{t}}-new-{{step}}", flush=True)
        step += 1
    store.close()
""")


def test_puts_that_land_while_a_policy_runs_are_kept(tmp_path):
    path = tmp_path / "r.qvc"
    with GitCheckpointStore(path) as store:
        for t in ("t0", "t1", "t2"):
            fill(store, t, 30)
    time.sleep(1.2)
    started = time.time()
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=os.path.dirname(os.path.dirname(__file__))))
    writer = subprocess.Popen([sys.executable, str(script), str(path), "2"], stdout=subprocess.PIPE, text=True,
                              env=child_env())
    with GitCheckpointStore(path) as store:
        time.sleep(0.5)
        rounds = 0
        while writer.poll() is None:
            # what is older than the writer's first put goes, the writer's puts never do (commit times
            # are whole seconds: the cut-off is the second the writer started in, the old ones are older)
            now = time.time()
            store.retain(Policy(max_age=now - math.floor(started) + 0.01), reclaim=False, now=now)
            rounds += 1
        acknowledged = writer.stdout.read().split()
        assert writer.returncode == 0 and rounds >= 2 and acknowledged
        for t in ("t0", "t1", "t2"):
            ids = line_ids(store, t)
            assert not [i for i in ids if "-new-" not in i]  # the old ones went
            assert [i for i in acknowledged if i.startswith(t)] == ids[::-1]  # every put is there, in order
    fsck(path)


KILLED = textwrap.dedent("""
    import sys
    import qvc.store.retention as retention
    from qvc import GitCheckpointStore
    retention.BATCH_THREADS = 10  # several batches: a kill lands between them, or inside one
    with GitCheckpointStore(sys.argv[1]) as store:
        print("go", flush=True)
        store.retain(retention.Policy(keep_last=2))
""")


@pytest.mark.parametrize("rounds", [pytest.param(2, id="default"), pytest.param(12, marks=pytest.mark.slow)])
def test_a_policy_killed_midway_leaves_each_thread_before_or_after(tmp_path, rounds, request):
    if rounds > 2 and not slow_enabled(request.config):
        pytest.skip("long variant: run with -m slow (or QVC_SLOW=1)")
    rng = random.Random(7)
    mixed = 0  # rounds killed between two batches or inside one (some threads cut, others not)
    for r in range(rounds):
        path = tmp_path / f"r{r}.qvc"
        with GitCheckpointStore(path) as store:
            lines = {f"t{t:03d}": fill(store, f"t{t:03d}", 6) for t in range(60)}
        proc = subprocess.Popen([sys.executable, "-c", KILLED, str(path)], stdout=subprocess.PIPE, text=True,
                                env=child_env())
        assert proc.stdout.readline() == "go\n"
        time.sleep(rng.uniform(0.0, 0.2))  # the whole policy takes about 0.15 s here
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with GitCheckpointStore(path) as store:
            cut = 0
            for t, ids in lines.items():
                assert line_ids(store, t) in (ids[::-1], ids[-2:][::-1]), t
                cut += len(line_ids(store, t)) == 2
                assert store.get_tuple(CheckpointConfig(t)).checkpoint.state_data["step"] == 5
            mixed += 0 < cut < len(lines)
            store.retain(Policy(keep_last=2))  # the next run finishes the rest
            assert all(line_ids(store, t) == ids[-2:][::-1] for t, ids in lines.items())
        fsck(path)
    assert mixed or rounds < 10, "no kill landed while the policy ran"
