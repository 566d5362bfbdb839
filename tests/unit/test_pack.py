"""qvc.plumbing.pack: object ids, packs and indexes that the real git reads byte for byte, merges, deflate."""

from __future__ import annotations

import os
import random
import re
import zlib

import pytest
from helpers import examples, fsck, run_git
from hypothesis import given, settings
from hypothesis import strategies as st

from qvc.plumbing import pack


@pytest.fixture
def bare(tmp_path):
    path = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(path))
    return path


def _blob_sha(repo, data: bytes) -> str:
    return run_git(repo, "hash-object", "-w", "--stdin", input=data, text=False).stdout.decode().strip()


def _cat_batch(repo, shas: list[str]) -> dict[str, tuple[str, bytes]]:
    """``{sha: (type, data)}`` of every object, as ``git cat-file --batch`` reads them."""
    out = run_git(repo, "cat-file", "--batch", input="".join(s + "\n" for s in shas).encode(), text=False).stdout
    found, pos = {}, 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        head = out[pos:nl].decode().split()
        assert len(head) == 3, f"git cat-file: {out[pos:nl]!r}"
        sha, kind, size = head[0], head[1], int(head[2])
        found[sha] = (kind, out[nl + 1 : nl + 1 + size])
        assert out[nl + 1 + size : nl + 2 + size] == b"\n"
        pos = nl + 2 + size
    return found


def _verify(repo, base: str) -> dict[str, tuple[str, int]]:
    """``git verify-pack -v`` the pack; return ``{sha: (type, size)}`` of what it lists (the
    object's size, as ``git cat-file`` gives it: verify-pack gives a delta's own)."""
    out = run_git(repo, "verify-pack", "-v", base + ".idx").stdout
    listed = {}
    for line in out.splitlines():
        m = re.match(r"^([0-9a-f]{40}) (blob|tree|commit|tag)\s+(\d+) ", line)
        if m:
            listed[m.group(1)] = m.group(2)
    assert f"{base}.pack: ok" in out
    check = run_git(repo, "cat-file", "--batch-check", input="".join(s + "\n" for s in listed).encode(),
                    text=False).stdout.decode().split("\n")
    sizes = {sha: (kind, int(size)) for sha, kind, size in (line.split() for line in check if line)}
    assert {sha: kind for sha, (kind, _) in sizes.items()} == listed
    return sizes


def _objects(seed: int = 0) -> list[tuple[str, bytes]]:
    """Blobs across the entry-header size boundaries, a tree of them and a commit of that tree."""
    rng = random.Random(seed)
    blobs = [b"", b"x", b"a" * 15, b"b" * 16, b"c" * 17, b"d" * 127, b"e" * 128, b"f" * 2047, b"g" * 2048,
             rng.randbytes(200_000), (b"compressible line %d\n" % seed) * 50_000, bytes(range(256)) * 7]
    entries = sorted((f"f{i:02d}", pack.object_id("blob", b)) for i, b in enumerate(blobs))
    tree = b"".join(b"100644 %s\x00%s" % (n.encode(), raw) for n, raw in entries)
    commit = (b"tree %s\nauthor a <a@b> 1700000000 +0000\ncommitter a <a@b> 1700000000 +0000\n\nmsg %d\n"
              % (pack.object_id("tree", tree).hex().encode(), seed))
    return [("blob", b) for b in blobs] + [("tree", tree), ("commit", commit)]


# -- object ids ----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"hello\n", bytes(range(256)), b"\x00" * 70_000])
def test_object_id_of_a_blob_is_git_hash_object(data, tmp_path):
    want = run_git(None, "hash-object", "--stdin", input=data, text=False).stdout.decode().strip()
    assert pack.object_id("blob", data).hex() == want
    assert len(pack.object_id("blob", data)) == 20


def test_object_id_of_trees_and_commits_is_the_id_git_gives_them(bare):
    blob = _blob_sha(bare, b"content\n")
    sub = run_git(bare, "mktree", input=f"100644 blob {blob}\tinner\n".encode(), text=False).stdout.decode().strip()
    tree = run_git(bare, "mktree", input=f"100644 blob {blob}\tfile\n040000 tree {sub}\tdir\n".encode(),
                   text=False).stdout.decode().strip()
    who = ("-c", "user.name=A U Thor", "-c", "user.email=a@example.com")
    commit = run_git(bare, *who, "commit-tree", tree, "-m", "first").stdout.strip()
    merge = run_git(bare, *who, "commit-tree", tree, "-p", commit, "-p", commit, "-m", "twice\n\nbody ü").stdout.strip()
    for sha, kind in ((sub, "tree"), (tree, "tree"), (commit, "commit"), (merge, "commit")):
        data = run_git(bare, "cat-file", kind, sha, text=False).stdout
        assert pack.object_id(kind, data).hex() == sha
        stdin_sha = run_git(bare, "hash-object", "-t", kind, "--stdin", input=data, text=False).stdout.decode()
        assert stdin_sha.strip() == sha


# -- writing packs -----------------------------------------------------------------------------


def test_written_pack_passes_verify_pack_and_git_reads_every_object_byte_for_byte(bare):
    objects = _objects()
    pack_dir = str(bare / "objects" / "pack")
    base = pack.write(pack_dir, objects)
    assert os.path.dirname(base) == pack_dir
    assert os.path.isfile(base + ".pack") and os.path.isfile(base + ".idx")
    assert not [n for n in os.listdir(pack_dir) if ".tmp-" in n]
    with open(base + ".pack", "rb") as f:
        data = f.read()
    assert os.path.basename(base) == "pack-" + data[-20:].hex()  # named by its checksum, as git names packs
    assert pack.is_intact(base)

    want = {pack.object_id(k, d).hex(): (k, d) for k, d in objects}
    listed = _verify(bare, base)
    assert listed == {sha: (k, len(d)) for sha, (k, d) in want.items()}
    assert _cat_batch(bare, list(want)) == want
    for sha, (kind, d) in want.items():
        if kind == "blob" and len(d) < 5000:
            assert run_git(bare, "cat-file", "-p", sha, text=False).stdout == d
    commit = next(sha for sha, (k, _) in want.items() if k == "commit")
    run_git(bare, "update-ref", "refs/heads/main", commit)
    fsck(bare)
    assert run_git(bare, "count-objects", "-v").stdout.count(f"in-pack: {len(want)}") == 1


def test_duplicates_are_stored_once_and_given_oids_give_the_same_pack(bare):
    objects = _objects(1)
    twice = objects + objects[:3]
    pack_dir = str(bare / "objects" / "pack")
    built = pack.build(twice)
    assert pack.build(twice, [pack.object_id(k, d) for k, d in twice]) == built
    base = pack.write(pack_dir, twice, [pack.object_id(k, d) for k, d in twice])
    assert os.path.basename(base) == "pack-" + built[2]
    with open(base + ".pack", "rb") as f:
        assert f.read() == built[0]
    listed = _verify(bare, base)
    assert len(listed) == len(objects)
    assert sorted(oid.hex() for oid, _ in pack.read_index(base + ".idx")) == sorted(listed)


def test_a_pack_of_one_empty_blob_and_an_empty_pack(bare):
    pack_dir = str(bare / "objects" / "pack")
    base = pack.write(pack_dir, [("blob", b"")])
    assert _verify(bare, base) == {"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391": ("blob", 0)}
    empty = pack.write(pack_dir, [], fsync=True)
    assert pack.is_intact(empty)
    assert pack.read_index(empty + ".idx") == []
    fsck(bare)


def test_is_intact_rejects_a_truncated_or_missing_pack(bare, tmp_path):
    base = pack.write(str(bare / "objects" / "pack"), _objects(2))
    for ext, cut in ((".pack", 100), (".idx", 1000), (".pack", 0)):
        copy = str(tmp_path / "copy")
        for e in (".pack", ".idx"):
            with open(base + e, "rb") as src, open(copy + e, "wb") as dst:
                data = src.read()
                dst.write(data[:cut] if e == ext else data)
        assert not pack.is_intact(copy), (ext, cut)
    os.unlink(copy + ".pack")
    assert not pack.is_intact(copy)


# -- merging -----------------------------------------------------------------------------------


def test_merge_keeps_every_object_of_every_pack(bare):
    pack_dir = str(bare / "objects" / "pack")
    groups = [_objects(0), _objects(1), _objects(0)[:4] + [("blob", b"only in the third")]]
    bases = [pack.write(pack_dir, g) for g in groups]
    want = {pack.object_id(k, d).hex(): (k, d) for g in groups for k, d in g}
    merged = pack.merge(pack_dir, bases)
    assert merged not in bases
    assert pack.is_intact(merged)
    listed = _verify(bare, merged)
    assert listed == {sha: (k, len(d)) for sha, (k, d) in want.items()}
    for base in bases:  # the caller removes the old packs: the merged one alone must serve every object
        os.unlink(base + ".idx")
        os.unlink(base + ".pack")
    assert _cat_batch(bare, list(want)) == want
    for sha, (kind, _) in want.items():
        if kind == "commit":
            run_git(bare, "update-ref", f"refs/heads/c{sha[:8]}", sha)
    fsck(bare)

    # a merged pack merges again, with a new small one
    extra = pack.write(pack_dir, [("blob", b"later")])
    again = pack.merge(pack_dir, [merged, extra], fsync=True)
    want[pack.object_id("blob", b"later").hex()] = ("blob", b"later")
    assert _verify(bare, again) == {sha: (k, len(d)) for sha, (k, d) in want.items()}


def _versions(seed: int, n: int) -> list[bytes]:
    """Versions of a growing msgpack list (a transcript chunk): each one more item than the last."""
    rng = random.Random(seed)
    items: list[bytes] = []
    out = []
    for _ in range(n):
        items.append(rng.randbytes(300))
        out.append(b"\xdc" + len(items).to_bytes(2, "big") + b"".join(b"\xc5" + len(i).to_bytes(2, "big") + i
                                                                     for i in items))
    return out


def _chunk_packs(pack_dir: str, seed: int, n: int, name: str = "00000000") -> tuple[list[str], dict]:
    """One small pack per version (as one put each writes), each with a tree naming its blob."""
    bases, want = [], {}
    for data in _versions(seed, n):
        oid = pack.object_id("blob", data)
        tree = b"100644 %s\x00%s" % (name.encode(), oid)
        bases.append(pack.write(pack_dir, [("blob", data), ("tree", tree)]))
        want[oid.hex()] = ("blob", data)
        want[pack.object_id("tree", tree).hex()] = ("tree", tree)
    return bases, want


def _chains(repo, base: str) -> dict[int, int]:
    """``{chain length: objects}`` as ``git verify-pack -v`` counts them (0: stored whole)."""
    out = run_git(repo, "verify-pack", "-v", base + ".idx").stdout
    counts = {int(n): int(k) for n, k in re.findall(r"^chain length = (\d+): (\d+) objects?$", out, re.MULTILINE)}
    counts[0] = int(re.search(r"^non delta: (\d+) objects?$", out, re.MULTILINE).group(1))
    return counts


def test_merge_stores_versions_of_a_growing_blob_as_deltas_git_reads(bare):
    pack_dir = str(bare / "objects" / "pack")
    bases, want = _chunk_packs(pack_dir, 1, 24)
    other, more = _chunk_packs(pack_dir, 2, 6, name="00000001")  # another field's chunk, interleaved by name
    verbatim = sum(os.path.getsize(b + ".pack") for b in bases + other)
    merged = pack.merge(pack_dir, bases + other)
    want |= more
    for base in bases + other:
        os.unlink(base + ".idx")
        os.unlink(base + ".pack")
    assert _verify(bare, merged) == {sha: (k, len(d)) for sha, (k, d) in want.items()}
    assert _chains(bare, merged) == {0: 30 + 2, 1: 23 + 5}  # trees, and each chunk's newest version, whole
    assert os.path.getsize(merged + ".pack") < verbatim / 5
    assert _cat_batch(bare, list(want)) == want
    from qvc.plumbing.odb import ObjectReader

    reader = ObjectReader(str(bare))
    for sha, (kind, data) in want.items():
        assert reader.read(bytes.fromhex(sha)) == ({"blob": 3, "tree": 2}[kind], data)
    run_git(bare, "fsck", "--strict", "--no-dangling")

    # a pack of deltas merges again: each delta keeps its base, at its new distance
    extra, newest = _chunk_packs(pack_dir, 3, 3, name="00000002")
    again = pack.merge(pack_dir, [*extra, merged])
    want |= newest
    for base in [*extra, merged]:
        os.unlink(base + ".idx")
        os.unlink(base + ".pack")
    assert _verify(bare, again) == {sha: (k, len(d)) for sha, (k, d) in want.items()}
    assert _chains(bare, again) == {0: 30 + 2 + 3 + 1, 1: 23 + 5 + 2}
    assert _cat_batch(bare, list(want)) == want


def test_merge_takes_a_pack_git_wrote_with_offset_deltas_and_refuses_ref_deltas(bare, tmp_path):
    rng = random.Random(5)
    base_data = rng.randbytes(20_000)
    contents = [base_data + b"%d" % i for i in range(4)]
    shas = [_blob_sha(bare, data) for data in contents]
    listing = "".join(s + "\n" for s in shas).encode()
    bases = {}
    for flag in ("--delta-base-offset", None):
        prefix = str(tmp_path / f"git{flag is None}")
        args = ["pack-objects", *([flag] if flag else []), prefix]
        bases[flag] = f"{prefix}-{run_git(bare, *args, input=listing, text=False).stdout.decode().strip()}"
        assert "chain length = 1" in run_git(bare, "verify-pack", "-v", bases[flag] + ".idx").stdout  # deltas indeed
    assert pack.mergeable(bases["--delta-base-offset"]) and not pack.mergeable(bases[None])
    with pytest.raises(ValueError, match="REF_DELTA"):
        pack.merge(str(tmp_path), [bases[None]])
    merged = pack.merge(str(tmp_path), [bases["--delta-base-offset"]])
    mirror = tmp_path / "mirror.git"
    run_git(None, "init", "-q", "--bare", str(mirror))
    for ext in (".pack", ".idx"):
        os.link(merged + ext, mirror / "objects" / "pack" / os.path.basename(merged + ext))
    assert _cat_batch(mirror, shas) == {s: ("blob", d) for s, d in zip(shas, contents, strict=True)}


# -- deflate -------------------------------------------------------------------------------------

SIZES = [0, 1, 2, 249, 250, 251, 255, 256, 257, 511, 512, 513, 1023, 1024, 4096, 32_505, 32_506, 32_768,
         32_769, 65_536, 300_000]


@pytest.mark.parametrize("size", SIZES)
def test_deflate_round_trips_through_zlib_at_every_window_size(size):
    rng = random.Random(size)
    for data in (rng.randbytes(size), (b"abcabcabd" * (size // 9 + 1))[:size], b"\x00" * size):
        out = pack.deflate(data)
        assert zlib.decompress(out) == data
        assert zlib.decompress(out, zlib.MAX_WBITS) == data  # git inflates with the default 32 KiB window
        d = zlib.decompressobj()
        assert d.decompress(out) + d.flush() == data and d.eof and d.unused_data == b""


@settings(max_examples=examples(150), deadline=None)
@given(st.binary(max_size=5000))
def test_deflate_round_trip_property(data):
    assert zlib.decompress(pack.deflate(data)) == data
