"""How a checkpoint is laid out as git objects (the on-disk format, version 1).

A checkpoint is one commit. Its tree holds::

    .qvc             msgpack blob: {"format": 1, "checkpoint": header, "metadata": metadata}
    <field>          msgpack blob of one top-level state field, or, for a list longer than
    <field>/         CHUNK items, a tree of CHUNK-item msgpack blobs named 00000000, 00000001, ...

Field names are escaped with :func:`qvc.store.refnames.encode_name` (``%XX`` for ``/``, ``%``,
control characters and a leading ``.``), so no field can collide with ``.qvc``. Unchanged
fields reuse the parent's blob ids, and an appended-to list rewrites only its last chunk, so
a growing transcript costs what it adds.

The commit message is ``step N · source · K fields changed`` followed by the changed field
names and trailers ``Checkpoint-Id``, ``Thread`` and ``Step``.

This module only builds and parses bytes; it does not touch the repository.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

from qvc.codec import serde
from qvc.errors import CorruptionError, SerializationError
from qvc.lazy import Pattern
from qvc.plumbing.objects import MODE_BLOB, MODE_TREE, Entry, tree_bytes
from qvc.plumbing.pack import object_id
from qvc.store.refnames import decode_name, encode_name

FORMAT = 1
HEADER = ".qvc"
CHUNK = 64
_NEEDS_ESCAPE = Pattern(r"[%\x00-\x1f\x7f]|^\s|\s$")


def escape_trailer(value: str) -> str:
    """A trailer-safe, reversible form of ``value`` (one line, no edge whitespace)."""
    return _NEEDS_ESCAPE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode()), value)


def unescape_trailer(value: str) -> str:
    return decode_name(value) if "%" in value else value


def commit_message(step: int, source: str, changed: list[str], checkpoint_id: str, thread_id: str) -> str:
    n = len(changed)
    subject = f"step {step} · {source or 'put'} · {n} field{'s' if n != 1 else ''} changed"
    body = ""
    if changed:
        shown = ", ".join(changed[:20]) + (f", … (+{n - 20})" if n > 20 else "")
        body = f"Changed: {escape_trailer(shown)}\n\n"
    trailers = (
        f"Checkpoint-Id: {escape_trailer(checkpoint_id)}\n"
        f"Thread: {escape_trailer(thread_id)}\n"
        f"Step: {step}\n"
    )
    return f"{subject}\n\n{body}{trailers}"


_TRAILER = Pattern(r"^(Checkpoint-Id|Thread|Step): (.*)$", re.M)
#: The trailer of a checkpoint that retention made the first of its line (:mod:`qvc.store.retention`).
CUT = "Retention-Cut"
_CUT = Pattern(r"^Retention-Cut: (.*)$", re.M)


def cut_note(message: str) -> str | None:
    """What the :data:`CUT` trailer of a commit message says (how many earlier checkpoints
    retention removed, when, by which policy), ``None`` if it has none."""
    found = _CUT.search(message)
    return found.group(1) if found else None


def parse_trailers(message: str) -> dict[str, str]:
    """The qvc trailers of a commit message (``{}`` for a commit qvc did not write)."""
    return {k: unescape_trailer(v) for k, v in _TRAILER.findall(message)}


def encode_header(header: dict[str, Any], metadata: dict[str, Any]) -> bytes:
    return serde.dumps({"format": FORMAT, "checkpoint": header, "metadata": metadata}, "metadata")


def decode_header(data: bytes, what: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = serde.loads(data, what)
    if not isinstance(obj, dict) or obj.get("format") != FORMAT or not isinstance(obj.get("checkpoint"), dict):
        raise CorruptionError(f"{what}: not a qvc checkpoint header (format {FORMAT})")
    meta = obj.get("metadata")
    return obj["checkpoint"], meta if isinstance(meta, dict) else {}


__all__ = ["CHUNK", "FORMAT", "HEADER", "FieldEntry", "TreeBuilder", "blob_entry", "chunk_name", "chunks_of",
           "commit_message", "decode_header", "encode_header", "escape_trailer", "is_chunked", "list_entry",
           "parse_trailers", "serialize_field", "unescape_trailer"]

#: A state field's entry in its checkpoint's tree, ``(mode, raw id)``: one blob, or a list stored
#: in chunks (a tree of chunk blobs named :func:`chunk_name`). What an adapter that encodes its
#: own values (``GitCheckpointStore.put_entries``) builds, with the functions below: it never
#: builds git objects itself.
FieldEntry = tuple[int, bytes]
Write = Callable[[str, bytes], object]  # stores a git object: ``write(kind, data)``


def is_chunked(mode: int) -> bool:
    """Whether a field entry of this mode (``store.tree_entries(sha)[name][0]``) is a list in chunks."""
    return mode == MODE_TREE


def blob_entry(write: Write, data: bytes, old: FieldEntry | None) -> FieldEntry:
    """The entry of a field stored as the blob ``data``, written through ``write`` unless ``old``
    (the parent's entry of that field) is that blob already."""
    raw = object_id("blob", data)
    if old != (MODE_BLOB, raw):
        write("blob", data)
    return (MODE_BLOB, raw)


def list_entry(write: Write, chunks: Sequence[FieldEntry], old: FieldEntry | None) -> FieldEntry:
    """The entry of a field stored as a list in chunks, ``chunks[i]`` the entry of chunk ``i`` (a
    :func:`blob_entry`), its tree written through ``write`` unless ``old`` is that tree already."""
    data = tree_bytes({chunk_name(i): chunk for i, chunk in enumerate(chunks)})
    raw = object_id("tree", data)
    if old != (MODE_TREE, raw):
        write("tree", data)
    return (MODE_TREE, raw)


def chunks_of(read_tree: Callable[[bytes], dict[str, FieldEntry]], entry: FieldEntry | None) -> list[FieldEntry]:
    """The chunk entries of a list field's ``entry``, in order (none for a blob or ``None``);
    ``read_tree(raw)`` reads a tree (``History.tree``)."""
    if entry is None or not is_chunked(entry[0]):
        return []
    return [chunk for _, chunk in sorted(read_tree(entry[1]).items())]


def chunk_name(i: int) -> str:
    return f"{i:08d}"


def serialize_field(name: str, value: Any) -> bytes | list[bytes]:
    """Serialize one state field: bytes, or a list of chunk bytes for a long list."""
    path = f'state_data["{name}"]'
    if type(value) is list and len(value) > CHUNK:
        chunks = []
        for start in range(0, len(value), CHUNK):
            part = value[start : start + CHUNK]
            try:
                chunks.append(serde.dumps(part, path))
            except SerializationError:
                for i, item in enumerate(part, start):  # re-run item by item for the exact path
                    serde.dumps(item, f"{path}[{i}]")
                raise
        return chunks
    return serde.dumps(value, path)


class TreeBuilder:
    """Builds a checkpoint's root tree against its parent's, writing only what changed.

    ``write(kind, data) -> raw oid`` stores an object; ``hash_blob(data) -> raw oid`` only
    computes an id; ``read_tree(raw) -> entries`` reads a tree; ``known_blob(raw)`` returns a
    blob's bytes when they are at hand without reading the repository (else ``None``), so an
    unchanged field costs a comparison instead of a hash.
    """

    def __init__(self, write: Callable[[str, bytes], bytes], hash_blob: Callable[[bytes], bytes],
                 read_tree: Callable[[bytes], dict[str, Entry]],
                 known_blob: Callable[[bytes], bytes | None] = lambda raw: None):
        self._write = write
        self._hash = hash_blob
        self._read_tree = read_tree
        self._known = known_blob

    def fields(self, state: dict[str, Any], parent: dict[str, Entry]) -> tuple[dict[str, Entry], list[str]]:
        """Entries for the state fields: (entries, names of fields added or changed against ``parent``)."""
        entries: dict[str, Entry] = {}
        changed: list[str] = []
        for name, value in state.items():
            if not isinstance(name, str):
                raise SerializationError(f"state_data key {name!r}: field names must be strings")
            ename = encode_name(name)
            data = serialize_field(name, value)
            old = parent.get(ename)
            entry = self._chunked(data, old) if isinstance(data, list) else self._blob(data, old)
            entries[ename] = entry
            if old != entry:
                changed.append(name)
        return entries, changed

    def _same(self, data: bytes, raw: bytes) -> bool:
        known = self._known(raw)
        return known == data if known is not None else self._hash(data) == raw

    def _blob(self, data: bytes, old: Entry | None) -> Entry:
        if old is not None and old[0] == MODE_BLOB and self._same(data, old[1]):
            return old
        return (MODE_BLOB, self._write("blob", data))

    def _chunked(self, chunks: list[bytes], old: Entry | None) -> Entry:
        prior = self._read_tree(old[1]) if old is not None and old[0] == MODE_TREE else {}
        sub: dict[str, Entry] = {}
        for i, data in enumerate(chunks):
            name = chunk_name(i)
            was = prior.get(name)
            sub[name] = was if was is not None and self._same(data, was[1]) else (MODE_BLOB, self._write("blob", data))
        if sub == prior and old is not None:
            return old
        return (MODE_TREE, self._write("tree", tree_bytes(sub)))
