"""Thread ids <-> git ref names: every awkward id maps to a valid, distinct, reversible ref."""

from __future__ import annotations

import uuid

import pygit2
import pytest
from helpers import put

from qvc import CheckpointConfig, InvalidThreadIdError
from qvc.store.refnames import HEADS, MAX_ENCODED, decode_thread, encode_thread, head_ref, superseded_prefix, writes_ref

AWKWARD = [
    "with space",
    " leading and trailing ",
    "a/b",
    "a",
    "a/b/c",
    "a//b",
    "/",
    "trailing/",
    "/leading",
    "dots.in.name",
    ".",
    "..",
    "a..b",
    ".hidden",
    "x.",
    "x.lock",
    ".lock",
    "refs/heads/x",
    "HEAD",
    "head",
    "A",
    "MiXeD",
    "@",
    "@{upstream}",
    "a~1^2:c?d*e[f\\g",
    "-leading-dash",
    "%41",
    "%",
    "%%",
    "100%",
    "日本語のスレッド",
    "émoji 🎉 thread",
    "Ω≈ç√",
    "tab\there",
    "new\nline",
    "nul\x00byte",
    "\x01\x1f\x7f",
    "a" * 300,
    "a" * 299 + "b",
    "é" * 150,
    "🎉" * 60,
    "x" * 200,
    "x" * 201,
]
SIMPLE = ["run_3f2a9c", "t1", "thread-1", "run_" + "0123456789ab", uuid.UUID(int=7).hex, "a_b-c"]
ALL = AWKWARD + SIMPLE


def _escaped_len(thread_id: str) -> int:
    """Length of the documented plain encoding: [a-z0-9_-] kept, every other UTF-8 byte as %XX."""
    safe = set("abcdefghijklmnopqrstuvwxyz0123456789_-")
    return sum(1 if c in safe else 3 * len(c.encode()) for c in thread_id)


def _ids(values):
    return [repr(v)[:40] for v in values]


def test_the_awkward_ids_are_distinct():
    assert len(set(ALL)) == len(ALL)


@pytest.mark.parametrize("thread_id", ALL, ids=_ids(ALL))
def test_maps_to_a_valid_ref(thread_id):
    enc = encode_thread(thread_id)
    assert enc and "/" not in enc  # one path component
    assert pygit2.reference_is_valid_name(HEADS + enc), enc
    assert head_ref(thread_id) == HEADS + enc
    assert pygit2.reference_is_valid_name(head_ref(thread_id))
    assert pygit2.reference_is_valid_name(superseded_prefix(thread_id) + "0" * 40)
    assert len(enc.encode()) <= MAX_ENCODED


def test_encodings_are_distinct_even_ignoring_case():
    encs = [encode_thread(t) for t in ALL]
    assert len(set(encs)) == len(ALL)
    # distinct on case-insensitive file systems too (refs are files)
    assert len({e.lower() for e in encs}) == len(ALL)
    assert encode_thread("A") != encode_thread("a")
    assert encode_thread("a") != encode_thread("a/b")
    assert not encode_thread("a/b").startswith(encode_thread("a") + "/")


@pytest.mark.parametrize("thread_id", ALL, ids=_ids(ALL))
def test_decode_reverses_encode(thread_id):
    decoded = decode_thread(encode_thread(thread_id))
    if _escaped_len(thread_id) > MAX_ENCODED:
        # hashed long ids cannot be decoded from the ref (the id is read from the commit)
        assert decoded is None
    else:
        assert decoded == thread_id


def test_long_ids_are_hashed_and_decode_to_none():
    for thread_id in ("a" * 300, "a" * 299 + "b", "é" * 150, "x" * 201):
        enc = encode_thread(thread_id)
        assert len(enc) <= MAX_ENCODED
        assert decode_thread(enc) is None
    assert encode_thread("a" * 300) != encode_thread("a" * 299 + "b")
    # a readable prefix is kept
    assert encode_thread("a" * 300).startswith("a" * 100)
    # at the limit, the id is still stored verbatim
    assert encode_thread("x" * 200) == "x" * 200
    assert decode_thread("x" * 200) == "x" * 200


@pytest.mark.parametrize("thread_id", SIMPLE)
def test_simple_ids_are_verbatim(thread_id):
    assert encode_thread(thread_id) == thread_id
    assert head_ref(thread_id) == "refs/heads/" + thread_id
    assert decode_thread(thread_id) == thread_id


def test_writes_ref_is_valid():
    assert pygit2.reference_is_valid_name(writes_ref("ab" * 20))


@pytest.mark.parametrize("bad", ["", None, 3, b"bytes", ["a"]])
def test_invalid_thread_ids_raise(bad):
    with pytest.raises(InvalidThreadIdError):
        encode_thread(bad)


# -- through the store ------------------------------------------------------------------


@pytest.mark.parametrize("thread_id", ALL, ids=_ids(ALL))
def test_store_put_get_list_threads_on_awkward_id(store, thread_id):
    returned = put(store, thread_id, "c0", 0, {"t": thread_id})
    assert returned == CheckpointConfig(thread_id, "c0")
    put(store, thread_id, "c1", 1, {"t": thread_id, "n": 1})
    tup = store.get_tuple(CheckpointConfig(thread_id))
    assert tup.checkpoint.id == "c1"
    assert tup.checkpoint.thread_id == thread_id
    assert tup.config == CheckpointConfig(thread_id, "c1")
    assert tup.checkpoint.state_data == {"t": thread_id, "n": 1}
    assert tup.parent_config == CheckpointConfig(thread_id, "c0")
    assert [t.checkpoint.id for t in store.list(CheckpointConfig(thread_id))] == ["c1", "c0"]
    assert store.threads() == [thread_id]
    assert store.head(thread_id) is not None


def test_store_all_awkward_ids_side_by_side(store, git):
    for i, thread_id in enumerate(ALL):
        put(store, thread_id, f"c{i}", 0, {"t": thread_id})
    assert store.threads() == sorted(ALL)
    for i, thread_id in enumerate(ALL):
        latest = store.get(CheckpointConfig(thread_id))
        assert (latest.id, latest.thread_id) == (f"c{i}", thread_id)
        assert [t.checkpoint.id for t in store.list(CheckpointConfig(thread_id))] == [f"c{i}"]
    listed = git("for-each-ref", "--format=%(refname)", "refs/heads/").stdout.splitlines()
    assert sorted(listed) == sorted(head_ref(t) for t in ALL)
    for thread_id in ALL:
        sha = git("rev-parse", "--verify", head_ref(thread_id)).stdout.strip()
        assert sha == store.head(thread_id)
    fsck = git("fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_store_reopen_keeps_awkward_ids(repo_path):
    from qvc import GitCheckpointStore

    with GitCheckpointStore(repo_path) as s:
        for i, thread_id in enumerate(ALL):
            put(s, thread_id, f"c{i}", 0, {"t": thread_id})
    with GitCheckpointStore(repo_path, create=False) as s:
        assert s.threads() == sorted(ALL)
        assert s.get(CheckpointConfig("a" * 300)).thread_id == "a" * 300
        assert s.get(CheckpointConfig("a" * 299 + "b")).thread_id == "a" * 299 + "b"
