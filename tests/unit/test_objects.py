"""qvc.plumbing.objects: trees and commits as bytes, checked against what the real git writes and accepts."""

from __future__ import annotations

import time

import pytest
from helpers import examples, fsck, run_git
from hypothesis import given, settings
from hypothesis import strategies as st

from qvc.errors import CorruptionError
from qvc.plumbing.objects import MODE_BLOB, MODE_TREE, SIGNATURE, commit_bytes, parse_tree, tree_bytes
from qvc.plumbing.pack import object_id


@pytest.fixture
def bare(tmp_path):
    path = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(path))
    return path


def _hash(repo, kind: str, data: bytes) -> str:
    return run_git(repo, "hash-object", "-t", kind, "-w", "--stdin", input=data, text=False).stdout.decode().strip()


def _mktree(repo, entries: dict[str, tuple[int, bytes]], *missing: str) -> str:
    """``git mktree`` of the entries, fed in reverse order (git sorts them itself)."""
    lines = [f"{mode:06o} {'tree' if mode == MODE_TREE else 'blob'} {raw.hex()}\t{name}\n"
             for name, (mode, raw) in sorted(entries.items(), reverse=True)]
    return run_git(repo, "mktree", *missing, input="".join(lines).encode(), text=False).stdout.decode().strip()


def _git_tree(repo, entries) -> tuple[str, bytes]:
    sha = _mktree(repo, entries)
    return sha, run_git(repo, "cat-file", "tree", sha, text=False).stdout


# -- trees -----------------------------------------------------------------------------------


def test_tree_bytes_is_what_git_mktree_writes_in_git_order(bare):
    blob = bytes.fromhex(_hash(bare, "blob", b"x\n"))
    other = bytes.fromhex(_hash(bare, "blob", b"y\n"))
    sub = bytes.fromhex(_mktree(bare, {"inner": (MODE_BLOB, blob)}))
    entries = {
        # as a tree "a" sorts as "a/": after "a.b" and "a-b" ('-' < '.' < '/'), before "a0"
        "a": (MODE_TREE, sub), "a.b": (MODE_BLOB, blob), "a-b": (MODE_BLOB, other), "a0": (MODE_BLOB, blob),
        # as a blob "b" sorts before "b.c" (a tree here) and "b/"-less names keep byte order
        "b": (MODE_BLOB, other), "b.c": (MODE_TREE, sub), "b0": (MODE_TREE, sub),
        ".qvc": (MODE_BLOB, blob), "Z": (MODE_BLOB, blob), "é": (MODE_BLOB, other), "z": (MODE_BLOB, blob),
        "run.sh": (0o100755, blob), "00000000": (MODE_BLOB, blob), "%2F": (MODE_BLOB, blob),
    }
    sha, data = _git_tree(bare, entries)
    assert tree_bytes(entries) == data
    assert object_id("tree", tree_bytes(entries)).hex() == sha
    names = [line.split("\t", 1)[1] for line in run_git(bare, "ls-tree", sha).stdout.splitlines()]
    assert names.index("a-b") < names.index("a.b") < names.index("a") < names.index("a0")
    assert names.index("b") < names.index("b.c") < names.index("b0")
    assert parse_tree(data) == entries
    run_git(bare, "update-ref", "refs/heads/t",
            run_git(bare, "-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", sha, "-m", "t").stdout.strip())
    fsck(bare)


def test_the_empty_tree():
    assert tree_bytes({}) == b""
    assert object_id("tree", b"").hex() == "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
    assert parse_tree(b"") == {}


_NAMES = st.text(alphabet="ab.-_0/~é", min_size=1, max_size=6).filter(lambda s: "/" not in s and s not in (".", ".."))


@settings(max_examples=examples(25), deadline=None)
@given(st.dictionaries(_NAMES, st.tuples(st.sampled_from([MODE_BLOB, MODE_TREE, 0o100755]),
                                         st.binary(min_size=20, max_size=20)), max_size=12))
def test_tree_bytes_matches_git_mktree_for_any_names(tmp_path_factory, entries):
    bare = tmp_path_factory.mktemp("t") / "bare.git"
    run_git(None, "init", "-q", "--bare", str(bare))
    sha = _mktree(bare, entries, "--missing")
    data = tree_bytes(entries)
    assert object_id("tree", data).hex() == sha
    assert run_git(bare, "cat-file", "tree", sha, text=False).stdout == data
    assert parse_tree(data) == entries


def test_parse_tree_reads_git_written_trees_and_inverts_tree_bytes(bare):
    blob = bytes.fromhex(_hash(bare, "blob", b""))
    entries = {f"n{i}": (MODE_BLOB if i % 3 else MODE_TREE, bytes([i]) * 20) for i in range(40)}
    entries["with space"] = (MODE_BLOB, blob)
    entries["ünï"] = (0o120000, blob)
    sha = _mktree(bare, entries, "--missing")
    data = run_git(bare, "cat-file", "tree", sha, text=False).stdout
    assert parse_tree(data) == entries
    assert tree_bytes(parse_tree(data)) == data


def test_parse_tree_keeps_a_non_utf8_name_git_allows(bare):
    blob = _hash(bare, "blob", b"")
    sha = run_git(bare, "mktree", input=b"100644 blob " + blob.encode() + b"\tcaf\xe9\n", text=False).stdout
    data = run_git(bare, "cat-file", "tree", sha.decode().strip(), text=False).stdout
    entries = parse_tree(data)
    assert list(entries) == ["caf\udce9"]  # surrogateescape: the byte is kept, not replaced
    assert entries["caf\udce9"] == (MODE_BLOB, bytes.fromhex(blob))


def test_tree_bytes_re_serializes_a_parsed_non_utf8_name(bare):
    blob = _hash(bare, "blob", b"")
    sha = run_git(bare, "mktree", input=b"100644 blob " + blob.encode() + b"\tcaf\xe9\n", text=False).stdout
    data = run_git(bare, "cat-file", "tree", sha.decode().strip(), text=False).stdout
    assert tree_bytes(parse_tree(data)) == data


@pytest.mark.parametrize("data", [
    b"100644 name",  # no NUL
    b"100644name\x00" + b"\x01" * 20,  # no space before the name
    b"10x644 name\x00" + b"\x01" * 20,  # a mode that is no octal number
    b" name\x00" + b"\x01" * 20,  # an empty mode
    b"100644 a\x00" + b"\x01" * 20 + b"100644 b",  # a torn second entry
])
def test_malformed_tree_data_raises_corruption_error(data):
    with pytest.raises(CorruptionError, match="abab"):
        parse_tree(data, bytes.fromhex("ab" * 20))
    with pytest.raises(CorruptionError):
        parse_tree(data)


def test_a_tree_cut_inside_an_object_id_raises_corruption_error():
    whole = tree_bytes({"a": (MODE_BLOB, b"\x01" * 20), "b": (MODE_BLOB, b"\x02" * 20)})
    with pytest.raises(CorruptionError):
        parse_tree(whole[:-7])


# -- commits ------------------------------------------------------------------------------------


def test_commit_bytes_are_accepted_by_git_hash_object_cat_file_and_fsck(bare):
    blob = bytes.fromhex(_hash(bare, "blob", b"state\n"))
    tree = tree_bytes({"f": (MODE_BLOB, blob)})
    tree_hex = _hash(bare, "tree", tree)
    assert tree_hex == object_id("tree", tree).hex()

    root = commit_bytes(tree_hex, [], "step 0 · put · 1 field changed\n\nCheckpoint-Id: c0\n", 1_700_000_000)
    root_hex = _hash(bare, "commit", root)
    child = commit_bytes(tree_hex, [root_hex], "ünïcödé subject\n\nbody\nline\n", 1_700_000_100)
    child_hex = _hash(bare, "commit", child)
    merge = commit_bytes(tree_hex, [child_hex, root_hex], "merge", 1_700_000_200)
    merge_hex = _hash(bare, "commit", merge)
    raw = commit_bytes(tree_hex, [merge_hex], "caf\udce9 (a lone byte, kept as is)\n", 0)
    raw_hex = _hash(bare, "commit", raw)
    assert b"caf\xe9 (a lone" in raw

    for hexid, data in ((root_hex, root), (child_hex, child), (merge_hex, merge), (raw_hex, raw)):
        assert object_id("commit", data).hex() == hexid
        assert run_git(bare, "cat-file", "commit", hexid, text=False).stdout == data
    run_git(bare, "update-ref", "refs/heads/main", raw_hex)
    fsck(bare)

    log = run_git(bare, "log", "--format=%H|%P|%T|%an <%ae>|%at|%cn <%ce>|%ct", "main").stdout.splitlines()
    assert [line.split("|")[0] for line in log] == [raw_hex, merge_hex, child_hex, root_hex]
    assert log[1].split("|")[1] == f"{child_hex} {root_hex}"
    for line, when in zip(log, ["0", "1700000200", "1700000100", "1700000000"], strict=True):
        _, _, t, author, at, committer, ct = line.split("|")
        assert t == tree_hex
        assert author == committer == SIGNATURE.decode()
        assert at == ct == when
    assert run_git(bare, "log", "-1", "--format=%B", child_hex).stdout == "ünïcödé subject\n\nbody\nline\n\n"


def test_commit_bytes_stamps_the_current_time_by_default(bare):
    before = int(time.time())
    data = commit_bytes("4b825dc642cb6eb9a060e54bf8d69288fbee4904", [], "now\n")
    after = int(time.time())
    committer = next(line for line in data.split(b"\n") if line.startswith(b"committer "))
    stamp, zone = committer.rsplit(b" ", 2)[1:]
    assert zone == b"+0000" and before <= int(stamp) <= after
    _hash(bare, "tree", b"")
    run_git(bare, "update-ref", "refs/heads/main", _hash(bare, "commit", data))
    fsck(bare)
