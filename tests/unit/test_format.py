"""qvc.store.format: the on-disk format of a checkpoint (header, trailers, chunked fields, tree building)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from helpers import examples, fsck, run_git
from hypothesis import given, settings
from hypothesis import strategies as st

from qvc.codec import serde
from qvc.errors import CorruptionError, SerializationError
from qvc.plumbing import pack
from qvc.plumbing.objects import MODE_BLOB, MODE_TREE, parse_tree, tree_bytes
from qvc.store.format import (
    CHUNK,
    FORMAT,
    HEADER,
    TreeBuilder,
    chunk_name,
    commit_message,
    decode_header,
    encode_header,
    escape_trailer,
    parse_trailers,
    serialize_field,
    unescape_trailer,
)

# -- the header ------------------------------------------------------------------------------

HEADER_VALUE = {
    "id": "c-1", "thread_id": "t/ü", "step": -1, "parent_id": None, "created_at": "2024-01-01T00:00:00+00:00",
    "schema_version": "v2", "versions_seen": {"node": {"ch": 3}}, "pending_writes": [["task", "ch", b"\x00v"]],
    "versions": ["ab" * 20, {"messages": 4, "": 1}],
}
METADATA = {"source": "loop", "step": 3, "when": dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.timezone.utc),
            "tags": {"a", "b"}, "pair": (1, 2), "big": 2**80}


def test_header_round_trip():
    data = encode_header(HEADER_VALUE, METADATA)
    assert isinstance(data, bytes)
    header, metadata = decode_header(data, "checkpoint x header")
    assert header == HEADER_VALUE
    assert metadata == METADATA and type(metadata["pair"]) is tuple and type(metadata["tags"]) is set
    assert serde.loads(data)["format"] == FORMAT
    assert decode_header(encode_header({}, {}), "h") == ({}, {})


@pytest.mark.parametrize("data", [
    b"",
    b"\xc1",  # a byte msgpack never uses
    b"\x92\x01",  # a truncated array
    serde.dumps("hello"),
    serde.dumps(["format", 1]),
    serde.dumps({"format": FORMAT + 1, "checkpoint": {}, "metadata": {}}),
    serde.dumps({"format": "1", "checkpoint": {}, "metadata": {}}),
    serde.dumps({"checkpoint": {}, "metadata": {}}),
    serde.dumps({"format": FORMAT, "checkpoint": ["id"], "metadata": {}}),
    serde.dumps({"format": FORMAT, "metadata": {}}),
])
def test_decode_header_rejects_what_is_not_a_qvc_header(data):
    with pytest.raises(CorruptionError, match="checkpoint 1234 header"):
        decode_header(data, "checkpoint 1234 header")


def test_decode_header_tolerates_missing_or_odd_metadata():
    assert decode_header(serde.dumps({"format": FORMAT, "checkpoint": {"id": "x"}}), "h") == ({"id": "x"}, {})
    assert decode_header(serde.dumps({"format": FORMAT, "checkpoint": {}, "metadata": [1]}), "h") == ({}, {})


# -- trailers ----------------------------------------------------------------------------------

HOSTILE = ["", " ", "  x  ", "\n", "a\nb", "a\r\nb", "%", "%%", "%25", "%2", "%zz", "100%", "\x00", "\x7f", "\t",
           "Step: 5", "x\nStep: 5\nThread: evil", "\u2028", "\x85", "\u3000lead", "trail\u00a0", "é", "😀 ok 😀",
           "%E3%80%80", "\x1f\x1e", " % \n % "]
TEXT = st.text(st.one_of(st.sampled_from(list("%\n\r\t \x00\x1f\x7f\x85\u2028\u3000\u00a0:.")), st.characters()))


def _trailer_safe(escaped: str) -> None:
    assert "\n" not in escaped and "\r" not in escaped
    assert not re.search(r"[\x00-\x1f\x7f]", escaped)
    assert escaped == escaped.strip()
    assert all(re.match(r"%[0-9A-F]{2}", escaped[m.start():]) for m in re.finditer("%", escaped))


@pytest.mark.parametrize("value", HOSTILE)
def test_escape_trailer_round_trips_hostile_strings(value):
    escaped = escape_trailer(value)
    _trailer_safe(escaped)
    assert unescape_trailer(escaped) == value


@settings(max_examples=examples(400), deadline=None)
@given(TEXT)
def test_escape_trailer_round_trip_property(value):
    escaped = escape_trailer(value)
    _trailer_safe(escaped)
    assert unescape_trailer(escaped) == value


def test_plain_values_are_not_escaped():
    for value in ("c-0001", "thread_1", "a b c", "ünïcödé", "1f0e-2d3c"):
        assert escape_trailer(value) == value
        assert unescape_trailer(value) == value


@settings(max_examples=examples(300), deadline=None)
@given(step=st.integers(-(2**63), 2**63), source=TEXT, changed=st.lists(TEXT, max_size=25),
       checkpoint_id=TEXT, thread_id=TEXT)
def test_commit_message_and_parse_trailers_round_trip(step, source, changed, checkpoint_id, thread_id):
    message = commit_message(step, source, changed, checkpoint_id, thread_id)
    assert parse_trailers(message) == {"Checkpoint-Id": checkpoint_id, "Thread": thread_id, "Step": str(step)}
    assert message.endswith(f"Step: {step}\n")


def test_commit_message_layout():
    one = commit_message(3, "", ["a"], "c", "t")
    assert one == "step 3 · put · 1 field changed\n\nChanged: a\n\nCheckpoint-Id: c\nThread: t\nStep: 3\n"
    none = commit_message(0, "input", [], "c0", "t")
    assert none.splitlines()[0] == "step 0 · input · 0 fields changed" and "Changed:" not in none
    many = commit_message(1, "loop", [f"f{i}" for i in range(25)], "c", "t")
    assert many.splitlines()[0] == "step 1 · loop · 25 fields changed"
    assert "Changed: f0, f1," in many and ", f19, … (+5)\n" in many and "f20" not in many
    hostile = commit_message(2, "put", ["a\nCheckpoint-Id: evil"], "real", "t")
    assert parse_trailers(hostile)["Checkpoint-Id"] == "real"
    assert len(re.findall("^Checkpoint-Id: ", hostile, re.M)) == 1


def test_parse_trailers_of_a_foreign_message_is_empty():
    assert parse_trailers("") == {}
    assert parse_trailers("Fix the build\n\nSigned-off-by: A <a@b>\n") == {}


# -- chunked fields ------------------------------------------------------------------------------


def test_lists_up_to_chunk_items_are_one_blob():
    for n in (0, 1, CHUNK):
        value = list(range(n))
        data = serialize_field("f", value)
        assert isinstance(data, bytes) and serde.loads(data) == value
    assert serialize_field("t", tuple(range(3 * CHUNK))) == serde.dumps(tuple(range(3 * CHUNK)))  # only lists
    assert serialize_field("d", {"k": list(range(500))}) == serde.dumps({"k": list(range(500))})  # only top level


@pytest.mark.parametrize("n, chunks", [(CHUNK + 1, 2), (2 * CHUNK, 2), (2 * CHUNK + 1, 3), (10 * CHUNK + 7, 11)])
def test_lists_longer_than_chunk_are_chunked(n, chunks):
    value = [{"i": i, "text": "x" * (i % 5)} for i in range(n)]
    parts = serialize_field("messages", value)
    assert isinstance(parts, list) and len(parts) == chunks
    for i, part in enumerate(parts):
        assert part == serde.dumps(value[i * CHUNK : (i + 1) * CHUNK])
    assert [item for part in parts for item in serde.loads(part)] == value


def test_an_unserializable_item_in_a_chunked_list_names_its_index():
    value = list(range(CHUNK + 10))
    value[CHUNK + 6] = object()
    with pytest.raises(SerializationError, match=re.escape(f'state_data["msgs"][{CHUNK + 6}]')):
        serialize_field("msgs", value)
    with pytest.raises(SerializationError, match=re.escape('state_data["x"]')):
        serialize_field("x", object())


def test_chunk_names_sort_as_numbers():
    names = [chunk_name(i) for i in (0, 1, 9, 10, 99, 12345)]
    assert names == ["00000000", "00000001", "00000009", "00000010", "00000099", "00012345"]
    assert sorted(names) == names


# -- TreeBuilder -----------------------------------------------------------------------------------


class Objects:
    """An in-memory object store that counts what goes through the builder's callbacks."""

    def __init__(self):
        self.data: dict[bytes, tuple[str, bytes]] = {}
        self.writes: list[tuple[str, bytes]] = []
        self.hashes = 0

    def write(self, kind: str, data: bytes) -> bytes:
        raw = pack.object_id(kind, data)
        self.data[raw] = (kind, data)
        self.writes.append((kind, data))
        return raw

    def hash_blob(self, data: bytes) -> bytes:
        self.hashes += 1
        return pack.object_id("blob", data)

    def read_tree(self, raw: bytes):
        kind, data = self.data[raw]
        assert kind == "tree"
        return parse_tree(data, raw)

    def known_blob(self, raw: bytes):
        found = self.data.get(raw)
        return found[1] if found and found[0] == "blob" else None

    def builder(self, known: bool = False) -> TreeBuilder:
        if known:
            return TreeBuilder(self.write, self.hash_blob, self.read_tree, self.known_blob)
        return TreeBuilder(self.write, self.hash_blob, self.read_tree)

    def root(self, fields, header: bytes):
        """The checkpoint's root tree as the store writes it: the fields plus the ``.qvc`` header blob."""
        entries = {**fields, HEADER: (MODE_BLOB, self.write("blob", header))}
        return self.write("tree", tree_bytes(entries)), entries

    def take(self) -> list[tuple[str, bytes]]:
        out, self.writes = self.writes, []
        return out


def _messages(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(n)]


def test_first_build_writes_every_field():
    objs = Objects()
    state = {"a": 1, "b": "x", "msgs": _messages(150), "a/b": None, ".hidden": [1]}
    entries, changed = objs.builder().fields(state, {})
    assert changed == list(state)
    assert set(entries) == {"a", "b", "msgs", "a%2Fb", "%2Ehidden"}
    assert entries["msgs"][0] == MODE_TREE and entries["a"][0] == MODE_BLOB
    assert [k for k, _ in objs.take()] == ["blob", "blob"] + ["blob"] * 3 + ["tree"] + ["blob", "blob"]
    sub = objs.read_tree(entries["msgs"][1])
    assert list(sub) == ["00000000", "00000001", "00000002"]
    assert [item for n in sub for item in serde.loads(objs.data[sub[n][1]][1])] == state["msgs"]
    for name, ename in (("a", "a"), ("b", "b"), ("a/b", "a%2Fb")):
        assert serde.loads(objs.data[entries[ename][1]][1]) == state[name]

    header = encode_header({"id": "c0"}, {})
    root, full = objs.root(entries, header)
    assert full == {**entries, HEADER: (MODE_BLOB, pack.object_id("blob", header))}
    assert objs.read_tree(root) == full


def test_unchanged_fields_share_the_parents_blobs_and_an_append_rewrites_only_the_last_chunk():
    objs = Objects()
    parent_state = {"a": 1, "b": "x", "msgs": _messages(150), "big": list(range(CHUNK * 3))}
    fields, _ = objs.builder().fields(parent_state, {})
    _, parent = objs.root(fields, encode_header({"id": "c0"}, {}))
    objs.take()
    old_sub = objs.read_tree(parent["msgs"][1])

    child_state = {"a": 1, "b": "y", "msgs": _messages(151), "big": list(range(CHUNK * 3))}
    entries, changed = objs.builder().fields(child_state, parent)
    assert changed == ["b", "msgs"]
    assert entries["a"] == parent["a"] and entries["big"] == parent["big"]
    assert entries["b"] != parent["b"] and entries["msgs"] != parent["msgs"]
    written = objs.take()
    assert [k for k, _ in written] == ["blob", "blob", "tree"]  # b, the last chunk, the chunk tree
    assert serde.loads(written[1][1]) == _messages(151)[2 * CHUNK :]
    new_sub = objs.read_tree(entries["msgs"][1])
    assert new_sub["00000000"] == old_sub["00000000"] and new_sub["00000001"] == old_sub["00000001"]
    assert new_sub["00000002"] != old_sub["00000002"]


def test_an_append_past_a_chunk_boundary_adds_one_chunk():
    objs = Objects()
    parent, _ = objs.builder().fields({"m": _messages(2 * CHUNK)}, {})
    objs.take()
    entries, changed = objs.builder().fields({"m": _messages(2 * CHUNK + 1)}, parent)
    assert changed == ["m"]
    written = objs.take()
    assert [k for k, _ in written] == ["blob", "tree"]
    assert serde.loads(written[0][1]) == _messages(2 * CHUNK + 1)[2 * CHUNK :]
    assert list(objs.read_tree(entries["m"][1])) == ["00000000", "00000001", "00000002"]


def test_a_list_growing_past_chunk_becomes_a_tree_and_back():
    objs = Objects()
    small, _ = objs.builder().fields({"m": _messages(CHUNK)}, {})
    assert small["m"][0] == MODE_BLOB
    big, changed = objs.builder().fields({"m": _messages(CHUNK + 1)}, small)
    assert big["m"][0] == MODE_TREE and changed == ["m"]
    again, changed = objs.builder().fields({"m": _messages(CHUNK)}, big)
    assert again == small and changed == ["m"]


@pytest.mark.parametrize("known", [False, True])
def test_an_unchanged_state_writes_nothing(known):
    objs = Objects()
    state = {"a": 1, "msgs": _messages(200), "": b"\x00"}
    fields, _ = objs.builder().fields(state, {})
    _, parent = objs.root(fields, encode_header({"id": "c0"}, {}))
    objs.take()
    objs.hashes = 0
    entries, changed = objs.builder(known).fields(state, parent)
    assert changed == [] and objs.take() == []
    assert entries == {n: e for n, e in parent.items() if n != HEADER}
    if known:  # the bytes were at hand: compared, never hashed
        assert objs.hashes == 0
    else:
        assert objs.hashes > 0


def test_field_names_must_be_strings():
    with pytest.raises(SerializationError, match="field names must be strings"):
        Objects().builder().fields({1: "x"}, {})


def test_built_trees_are_valid_git_trees(tmp_path):
    objs = Objects()
    state = {"messages": _messages(130), "n": 3, "a/b": {"x": [1, 2]}, ".dot": "d"}
    fields, _ = objs.builder().fields(state, {})
    root, _ = objs.root(fields, encode_header({"id": "c0"}, {"source": "t"}))
    bare = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(bare))
    pack.write(str(bare / "objects" / "pack"), list(objs.data.values()))
    listing = run_git(bare, "ls-tree", "-r", "--name-only", root.hex()).stdout.splitlines()
    assert listing == ["%2Edot", ".qvc", "a%2Fb", "messages/00000000", "messages/00000001", "messages/00000002",
                       "n"]
    chunk = run_git(bare, "cat-file", "blob", f"{root.hex()}:messages/00000002", text=False).stdout
    assert serde.loads(chunk) == state["messages"][2 * CHUNK :]
    tree_sha = root.hex()
    commit = run_git(bare, "-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", tree_sha, "-m", "c").stdout
    run_git(bare, "update-ref", "refs/heads/t", commit.strip())
    fsck(bare)
