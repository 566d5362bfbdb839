"""Signed history, tried as an auditor would: every commit a signing store writes verifies with
plain git and with ``qvc verify``, which agree commit by commit; tampering by plain git is found;
a repository that requires signatures refuses unsigned writes. Real ``ssh-keygen``, ``git`` and
the ``qvc`` command; no mocks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zlib

import pytest
from helpers import child_env, put, qvc, qvc_json, run_git

from qvc import CheckpointConfig, GitCheckpointStore, InvalidInputError, SignatureError
from qvc.readers.verify import verify
from qvc.store.signers import Signers

pytestmark = pytest.mark.skipif(subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0,
                                reason="ssh-keygen is not installed")


def keygen(path, comment: str = "k") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return str(path)


@pytest.fixture
def key(tmp_path):
    return keygen(tmp_path / "alice")


def git_states(repo) -> dict[str, str]:
    """``{commit: %G?}`` of every commit plain git reaches, checked against the repository's allowed signers."""
    allowed = os.path.join(repo, "qvc", "allowed_signers")
    lines = run_git(repo, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "--all", "--format=%H %G?").stdout
    return dict(line.split() for line in lines.splitlines())


def qvc_states(store) -> dict[str, str]:
    """``{commit: letter}`` as qvc verify sees them (G for the commits it verified)."""
    report = verify(store)
    letters = {"unsigned": "N", "bad": "B", "unknown-key": "U", "damaged": "B"}
    shas = run_git(store.path, "log", "--all", "--format=%H").stdout.split()
    bad = {p.sha: letters[p.status] for p in report.problems}
    return {sha: bad.get(sha, "G") for sha in shas}


def test_every_write_path_signs_and_plain_git_agrees(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo, signing_key=key) as store:
        assert store.signer is not None and store.signer.public_key_line.startswith("ssh-ed25519 ")
        for i in range(4):
            put(store, "t", f"c{i}", i)
        store.put_writes(CheckpointConfig("t", "c3"), [("task", "channel", {"v": 1})], "task-1")  # pending writes
        put(store, "fork", "f0", 0, parent_id=None)
        store.reset("t", "c1")  # time travel: the old line stays, superseded
        put(store, "t", "c1b", 2)
        store.delete(CheckpointConfig("t", "c0"))  # a rewrite: every descendant copied and signed anew
        store.set_tag("good", store.head("t"))
        Signers(repo).add("alice", open(key + ".pub").read())
        theirs, ours = git_states(repo), qvc_states(store)
        assert theirs == ours
        assert set(theirs.values()) == {"G"}, theirs
        report = verify(store)
        # six checkpoints and the record of the delete
        assert report and report.signed_by == {"alice": report.commits} and report.commits == 7
    proc = run_git(repo, "-c", f"gpg.ssh.allowedSignersFile={repo}/qvc/allowed_signers", "verify-commit", "t")
    assert 'Good "git" signature for alice with ED25519 key' in proc.stderr


def test_signing_does_not_change_what_readers_see(tmp_path, key):
    states = []
    for name, signing in (("plain", None), ("signed", key)):
        with GitCheckpointStore(tmp_path / name, signing_key=signing) as store:
            for i in range(3):
                put(store, "t", f"c{i}", i, state={"i": i, "text": "x" * i})
            states.append([(c.checkpoint.id, c.checkpoint.state_data, c.metadata, c.parent_config)
                           for c in store.list(CheckpointConfig("t"))])
        shown = qvc_json("--repo", str(tmp_path / name), "show", "t")
        when = ("commit", "time", "parents", "date", "created_at", "timestamp", "signature")
        states.append({k: v for k, v in shown.items() if k not in when})
    assert states[0] == states[2] and states[1] == states[3]


def test_the_key_comes_from_the_environment_or_the_repository_config(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "c0", 0)
    Signers(repo).add("alice", open(key + ".pub").read())
    # a program that opens the store without naming a key: $QVC_SIGNING_KEY, then qvc.signingKey
    script = ("import sys; from qvc import GitCheckpointStore, Checkpoint, CheckpointConfig\n"
              "with GitCheckpointStore(sys.argv[1]) as s:\n"
              "    s.put(CheckpointConfig('t'), Checkpoint(id=sys.argv[2], thread_id='t', step=int(sys.argv[3]),"
              " state_data={}), {'source': 'loop'})\n")
    subprocess.run([sys.executable, "-c", script, str(repo), "c1", "1"], check=True,
                   env={**child_env(), "QVC_SIGNING_KEY": key})
    run_git(repo, "config", "qvc.signingKey", key)
    subprocess.run([sys.executable, "-c", script, str(repo), "c2", "2"], check=True, env=child_env())
    with GitCheckpointStore(repo) as store:
        report = verify(store)
    assert [(p.checkpoint_id, p.status) for p in report.problems] == [("c0", "unsigned")]
    assert report.signed_by == {"alice": 2}


def test_tampering_by_plain_git_is_found(tmp_path, key):
    repo = tmp_path / "r.qvc"
    mallory = keygen(tmp_path / "mallory")
    with GitCheckpointStore(repo, signing_key=key) as store:
        for thread in ("a", "b", "c", "d", "e"):
            for i in range(3):
                put(store, thread, f"{thread}{i}", i, state={"thread": thread, "i": i})
    Signers(repo).add("alice", open(key + ".pub").read())
    Signers(repo).add("mallory", open(mallory + ".pub").read(), valid_before="19990101Z")

    def rewrite(ref: str, change) -> None:
        body = run_git(repo, "cat-file", "commit", ref, text=False).stdout
        new = run_git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=change(body), text=False)
        run_git(repo, "update-ref", ref, new.stdout.decode().strip())

    # a: the head's message changed, its signature kept
    rewrite("refs/heads/a", lambda body: body.replace(b"\n\n", b"\n\nedited: ", 1))
    # b: the signature stripped
    rewrite("refs/heads/b", lambda body: b"\n".join(
        ln for ln in body.split(b"\n") if not ln.startswith((b"gpgsig ", b" "))))
    # c: re-signed by a key whose validity ended long ago
    def resign(body: bytes) -> bytes:
        from qvc.plumbing.signing import load_signer, sign_commit, split_signature

        return sign_commit(split_signature(body)[0].replace(b"\n\n", b"\n\nmallory ", 1), load_signer(mallory))
    rewrite("refs/heads/c", resign)
    # d: a blob of the head's state replaced in place: every object made loose, then one file rewritten
    packs = repo / "objects" / "pack"
    for pack in sorted(packs.glob("*.pack")):
        moved = tmp_path / pack.name
        pack.rename(moved)
        pack.with_suffix(".idx").unlink()  # (the test's own copy of git's index, rebuilt by unpacking)
        run_git(repo, "unpack-objects", "-q", input=moved.read_bytes(), text=False)
    blob = run_git(repo, "rev-parse", "refs/heads/d:thread").stdout.strip()
    loose = repo / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 3\x00bad"))
    # e: the branch moved by plain git to a commit it made itself (unsigned)
    tree = run_git(repo, "rev-parse", "refs/heads/e^{tree}").stdout.strip()
    made = run_git(repo, "-c", "user.name=m", "-c", "user.email=m@m", "commit-tree", tree, "-p", "refs/heads/e",
                   "-m", "by git").stdout.strip()
    run_git(repo, "update-ref", "refs/heads/e", made)

    with GitCheckpointStore(repo, readonly=True) as store:
        report = verify(store)
    found = {(p.thread, p.status) for p in report.problems}
    assert ("a", "bad") in found
    assert ("b", "unsigned") in found
    assert ("c", "unknown-key") in found
    assert ("e", "unsigned") in found
    assert any(p.thread == "d" and p.status in ("damaged", "bad") for p in report.problems), report.problems
    # plain git agrees on the signatures
    states = git_states(repo)
    assert states[run_git(repo, "rev-parse", "refs/heads/a").stdout.strip()] == "B"
    assert states[run_git(repo, "rev-parse", "refs/heads/b").stdout.strip()] == "N"
    assert states[run_git(repo, "rev-parse", "refs/heads/c").stdout.strip()] in ("U", "E")
    proc = qvc("--repo", str(repo), "verify", check=7)
    assert "thread 'a'" in proc.stdout and "problem(s)" in proc.stdout
    lines = qvc("--repo", str(repo), "verify", "a", check=7).stdout.splitlines()
    assert len(lines) == 3 and "bad:" in lines[0] and "unexplained:" in lines[1] and "2 problem(s)" in lines[2]


def test_an_erasure_asked_for_is_on_the_record_and_one_done_behind_qvcs_back_is_not(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo, signing_key=key) as store:
        for thread in ("kept", "cut", "edited"):
            for i in range(4):
                put(store, thread, f"{thread}{i}", i)
        put(store, "gone", "g0", 0)
        store.delete(CheckpointConfig("kept", "kept1"))  # asked for: recorded, signed
        store.reset("kept", "kept2")  # time travel keeps the old line
        store.delete_threads(["gone"])
        records = [record for _, record in store.rewrites()]
    Signers(repo).add("alice", open(key + ".pub").read())
    assert [r["why"] for r in records] == ["delete thread(s) 'gone'", "delete checkpoint kept1 of thread kept"]
    assert [e["checkpoint_id"] for e in records[1]["removed"]] == ["kept1"]
    assert sorted(e["checkpoint_id"] for e in records[1]["rewritten"]) == ["kept2", "kept3"]
    assert records[0]["removed"] == [{"sha": records[0]["moves"][0][1], "checkpoint_id": "g0", "thread": "gone"}]
    assert records[1]["signer"] and records[1]["by"]
    with GitCheckpointStore(repo, readonly=True) as store:
        assert verify(store), verify(store).problems
    with GitCheckpointStore(repo, signing_key=key) as store:
        store.purge()  # the erasure made real: the removed checkpoints' data leaves the disk
    removed = records[1]["removed"][0]["sha"]
    assert run_git(repo, "cat-file", "-e", removed, check=False).returncode != 0
    with GitCheckpointStore(repo, readonly=True) as store:
        assert verify(store), verify(store).problems
        assert next(store.rewrites())[1]["why"].startswith("purge:")
    with GitCheckpointStore(repo, signing_key=key) as store:  # (a purge empties the reflogs: new movements)
        for i in range(4, 6):
            put(store, "edited", f"edited{i}", i)
    # behind qvc's back: a thread rewound by plain git (its newest checkpoints dropped) ...
    old = run_git(repo, "rev-parse", "refs/heads/cut~2").stdout.strip()
    run_git(repo, "update-ref", "refs/heads/cut", old)
    # ... and a reflog whose newest line was removed (the head no longer matches it)
    log = repo / "logs" / "refs" / "heads" / "edited"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:-1]))
    with GitCheckpointStore(repo, readonly=True) as store:
        report = verify(store)
    found = {(p.thread, p.status) for p in report.problems}
    assert found == {("cut", "unexplained"), ("edited", "reflog")}, report.problems
    assert qvc("--repo", str(repo), "verify", "kept").returncode == 0


def test_a_removed_signer_keeps_what_they_signed(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo, signing_key=key) as store:
        put(store, "t", "c0", 0)
        qvc("--repo", str(repo), "signers", "add", "alice", key + ".pub")
        time.sleep(1.1)  # commit times are whole seconds
        qvc("--repo", str(repo), "signers", "remove", "alice")
        time.sleep(1.1)
        put(store, "t", "c1", 1)
        report = verify(store)
    assert [(p.checkpoint_id, p.status) for p in report.problems] == [("c1", "unknown-key")]
    assert report.signed_by == {"alice": 1}
    letters = sorted(git_states(repo).values())
    assert letters == ["G", "U"]
    listed = qvc_json("--repo", str(repo), "signers", "list")
    assert listed[0]["principals"] == ["alice"] and listed[0]["valid_before"] and not listed[0]["valid_now"]


def test_a_repository_that_requires_signatures_refuses_unsigned_writes(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo, signing_key=key) as store:
        put(store, "t", "c0", 0)
    run_git(repo, "config", "qvc.requireSignatures", "true")
    with GitCheckpointStore(repo) as store:
        with pytest.raises(SignatureError, match="requires signed checkpoints"):
            put(store, "t", "c1", 1)
        assert [c.checkpoint.id for c in store.list(CheckpointConfig("t"))] == ["c0"]  # nothing stored
    proc = qvc("--repo", str(repo), "branch", "-m", "t", "t2", check=7)  # a rename copies commits: refused
    assert proc.stderr.count("\n") == 1 and "requires signed checkpoints" in proc.stderr
    qvc("--repo", str(repo), "tag", "x", "t")  # a ref, no commit: allowed
    qvc("--repo", str(repo), "branch", "-m", "t", "t2", QVC_SIGNING_KEY=key)
    with GitCheckpointStore(repo, signing_key=key) as store:
        put(store, "t2", "c1", 1)
        assert verify(store).problems[0].status == "unknown-key"  # signed; alice is not an allowed signer yet


def test_a_bad_key_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "nokey"
    bad.write_text("not a key\n")
    with pytest.raises(InvalidInputError, match="nokey"):  # given by the caller: the opening fails
        GitCheckpointStore(tmp_path / "r.qvc", signing_key=bad)
    repo = tmp_path / "r2.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "c0", 0)
    # configured ($QVC_SIGNING_KEY): reading and opening work, the first write fails and stores nothing
    assert qvc("--repo", str(repo), "log", "--oneline", "t", QVC_SIGNING_KEY=str(bad)).stdout.count("\n") == 1
    proc = qvc("--repo", str(repo), "branch", "-m", "t", "t2", check=2, QVC_SIGNING_KEY=str(bad))
    assert proc.stderr.count("\n") == 1 and "nokey" in proc.stderr
    assert qvc("--repo", str(repo), "branch").stdout.split() == ["t"]
    # qvc config refuses to name a key that does not load; one that stops loading can be unset
    proc = qvc("--repo", str(repo), "config", "qvc.signingKey", str(bad), check=2)
    assert proc.stderr.count("\n") == 1 and "nokey" in proc.stderr
    assert qvc("--repo", str(repo), "config", "qvc.signingKey", check=1).stdout == ""
    key = keygen(tmp_path / "good")
    qvc("--repo", str(repo), "config", "qvc.signingKey", key)
    assert qvc("--repo", str(repo), "config", "qvc.signingKey").stdout == key + "\n"
    os.unlink(key)
    qvc("--repo", str(repo), "branch", "-m", "t", "t2", check=2)  # the key is gone: refused, one line
    qvc("--repo", str(repo), "config", "--unset", "qvc.signingKey")
    qvc("--repo", str(repo), "branch", "-m", "t", "t2")
    assert "qvc.signingkey" not in qvc_json("--repo", str(repo), "config", "--list")


def test_signed_history_pushed_and_cloned_verifies(tmp_path, key):
    import qvc as lib

    repo, bare = tmp_path / "r.qvc", tmp_path / "remote.git"
    run_git(None, "init", "-q", "--bare", str(bare))
    with GitCheckpointStore(repo, signing_key=key) as store:
        for i in range(3):
            put(store, "t", f"c{i}", i)
        lib.remotes.add_remote(store, "origin", str(bare))
        lib.push(store, "origin")
    clone = tmp_path / "clone.qvc"
    lib.clone(str(bare), clone).close()
    Signers(clone).add("alice", open(key + ".pub").read())
    with GitCheckpointStore(clone, readonly=True) as store:
        report = verify(store)
        assert report and report.signed_by.get("alice", 0) >= 3
    assert set(git_states(clone).values()) == {"G"}
    assert qvc("--repo", str(clone), "verify", "t").returncode == 0


def test_a_repository_that_requires_signatures_fetches_and_clones_only_what_verifies(tmp_path, key):
    import qvc as lib

    bare, writer, reader = tmp_path / "remote.git", tmp_path / "writer.qvc", tmp_path / "reader.qvc"
    run_git(None, "init", "-q", "--bare", str(bare))
    signers = tmp_path / "allowed_signers"
    signers.write_text(f"alice {open(key + '.pub').read()}")
    with GitCheckpointStore(writer, signing_key=key) as store:
        put(store, "t", "c0", 0)
        lib.remotes.add_remote(store, "origin", str(bare))
        lib.push(store, "origin")
    lib.clone(str(bare), reader, allowed_signers=signers).close()  # every commit verifies: kept
    assert run_git(reader, "config", "qvc.requireSignatures").stdout.strip() == "true"
    with GitCheckpointStore(writer, signing_key=key) as store:
        put(store, "t", "c1", 1)
        lib.push(store, "origin")
    with GitCheckpointStore(reader) as store:
        result = lib.fetch(store, "origin")
        assert [u.status for u in result.updates if u.ref == "refs/remotes/origin/t"] == ["fast-forward"]
        tracked = store.repository.ref("refs/remotes/origin/t")
    # an unsigned checkpoint reaches the server: the fetch moves nothing and leaves no quarantine
    with GitCheckpointStore(writer) as store:
        put(store, "t", "c2", 2)
        lib.push(store, "origin")
    with GitCheckpointStore(reader) as store:
        with pytest.raises(SignatureError, match="fetch from origin refused: 1 commit"):
            lib.fetch(store, "origin")
        assert store.repository.ref("refs/remotes/origin/t") == tracked
        assert list(store.repository.refs("refs/qvc/incoming/")) == []
    proc = qvc("--repo", str(reader), "fetch", check=7)
    assert proc.stderr.count("\n") == 1 and "unsigned" in proc.stderr
    # and a clone of it that requires signatures is refused whole
    refused = tmp_path / "refused.qvc"
    proc = qvc("clone", "--allowed-signers", str(signers), str(bare), str(refused), check=7)
    assert "clone from" in proc.stderr and "unsigned" in proc.stderr and not refused.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".qvc-clone-")] == []


def test_show_log_and_the_api_say_each_checkpoints_signature_state(tmp_path, key):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo, signing_key=key) as store:
        put(store, "t", "c0", 0)
        put(store, "t", "c1", 1)
    # before anyone is allowed: a good signature by an unknown key
    assert "UNKNOWN-KEY: good signature by SHA256:" in qvc("--repo", str(repo), "show", "t").stdout
    qvc("--repo", str(repo), "signers", "add", "alice", key + ".pub")
    shown = qvc("--repo", str(repo), "show", "t").stdout.splitlines()
    assert [line for line in shown if line.startswith("Signed:")] == [
        f"Signed:   verified: alice ({qvc_json('--repo', str(repo), 'signers', 'list')[0]['fingerprint']})"]
    assert qvc_json("--repo", str(repo), "show", "t")["signature"]["status"] == "verified"
    lines = qvc("--repo", str(repo), "log", "--oneline", "--show-signature", "t").stdout.splitlines()
    assert len(lines) == 2 and all(line.endswith("· verified: alice (" + line.rsplit("(", 1)[1]) for line in lines)
    block = qvc("--repo", str(repo), "log", "-n", "1", "--show-signature", "t").stdout
    assert "\nSigned:  verified: alice (SHA256:" in block
    rows = qvc_json("--repo", str(repo), "log", "--show-signature", "t")
    assert [(r["id"], r["signature"]["status"], r["signature"]["principal"]) for r in rows] == [
        ("c1", "verified", "alice"), ("c0", "verified", "alice")]
    # a commit plain git made on top: unsigned, said so
    tree = run_git(repo, "rev-parse", "refs/heads/t^{tree}").stdout.strip()
    made = run_git(repo, "-c", "user.name=m", "-c", "user.email=m@m", "commit-tree", tree, "-p", "refs/heads/t",
                   "-m", "by git").stdout.strip()
    run_git(repo, "update-ref", "refs/heads/t", made)
    assert qvc_json("--repo", str(repo), "show", "t")["signature"]["status"] == "unsigned"
    # a repository that never signed says nothing
    with GitCheckpointStore(tmp_path / "plain.qvc") as store:
        put(store, "t", "c0", 0)
    assert "Signed:" not in qvc("--repo", str(tmp_path / "plain.qvc"), "show", "t").stdout
    assert qvc_json("--repo", str(tmp_path / "plain.qvc"), "show", "t")["signature"] is None
