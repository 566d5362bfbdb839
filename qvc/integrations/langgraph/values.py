"""How QvcSaver stores LangGraph channel values: serialization apart from the saver.

A channel value is the pair ``serde.dumps_typed(value)`` of the saver's LangGraph serializer,
stored as a msgpack ``[type, bytes]`` blob. A list longer than :data:`qvc.store.format.CHUNK`
items is a tree of chunk blobs, each a msgpack list of such pairs (one per item), so appending
to a long message list rewrites only its last chunk. With ``share=True`` the Python objects
of the chunks stored or loaded are remembered, so an unchanged item (the same object, ``is``)
is not serialized again and loads come back as the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from qvc.codec import serde as qserde
from qvc.errors import CorruptionError
from qvc.store.format import CHUNK, FieldEntry, blob_entry, chunk_name, chunks_of, is_chunked, list_entry
from qvc.store.git_store import GitCheckpointStore
from qvc.store.history import LRU, History
from qvc.store.refnames import decode_name

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

Write = Callable[[str, bytes], object]  # adds a git object (the store's put_entries gives one)


def pack_pair(type_tag: str, data: bytes) -> bytes:
    """The stored form of one typed pair: a msgpack ``[type, bytes]``."""
    return qserde.dumps([type_tag, bytes(data)])


def array_header(n: int) -> bytes:
    """The msgpack header of an array of ``n`` (< 65536) items: chunks are built from packed items."""
    return bytes([0x90 | n]) if n < 16 else b"\xdc" + n.to_bytes(2, "big")


class ChannelValues:
    """Channel values to and from git objects (see the module docstring); thread-safe.

    The serializer is passed on every call: a saver's ``with_allowlist`` copy shares this
    object but serializes with its own.
    """

    def __init__(self, history: History, *, share: bool = True):
        self._history = history
        self._share = share
        # chunk blob id -> tuple of (item object, packed [type, bytes]) as stored or loaded
        self._chunks: LRU = LRU(4096, 256 * 2**20, lambda items: sum(len(p) for _, p in items))

    def load(self, serde: SerializerProtocol, hexid: str, ename: str, mode: int, raw: bytes) -> Any:
        """The value of channel entry ``ename`` (``(mode, raw)``) of checkpoint commit ``hexid``.
        Raises :class:`CorruptionError` if it does not decode."""
        what = f"checkpoint {hexid[:12]} channel {decode_name(ename)!r}"
        if not is_chunked(mode):
            pair = qserde.loads(self._history.blob(raw), what)
            return serde.loads_typed((pair[0], pair[1]))
        out: list = []
        for i, (_, craw) in enumerate(chunks_of(self._history.tree, (mode, raw))):
            cname = chunk_name(i)
            items = self._chunks.get(craw) if self._share else None
            if items is None:
                pairs = qserde.loads(self._history.blob(craw), f"{what} chunk {cname}")
                if not isinstance(pairs, list):
                    raise CorruptionError(f"{what}: chunk {cname} is not a list")
                items = tuple((serde.loads_typed((t, b)), pack_pair(t, b)) for t, b in pairs)
                if self._share:
                    self._chunks.put(craw, items)
            out.extend(obj for obj, _ in items)
        return out

    def entry(self, serde: SerializerProtocol, write: Write, value: Any, old: FieldEntry | None) -> FieldEntry:
        """The tree entry of a channel holding ``value``, writing through ``write`` only what
        ``old`` (the parent's entry of that channel) does not already hold."""
        if type(value) is list and len(value) > CHUNK:
            return self._list(serde, write, value, old)
        t, b = serde.dumps_typed(value)
        return blob_entry(write, pack_pair(t, b), old)

    def _list(self, serde: SerializerProtocol, write: Write, value: list, old: FieldEntry | None) -> FieldEntry:
        prior = chunks_of(self._history.tree, old)
        sub: list[FieldEntry] = []
        for start in range(0, len(value), CHUNK):
            part = value[start:start + CHUNK]
            was = prior[start // CHUNK] if start // CHUNK < len(prior) else None
            known = self._chunks.get(was[1]) if (was is not None and self._share) else None
            if (known is not None and len(known) == len(part)
                    and all(a is b[0] for a, b in zip(part, known, strict=True))):
                sub.append(was)  # the same objects as that chunk holds: nothing to serialize
                continue
            items = []
            for i, obj in enumerate(part):
                if known is not None and i < len(known) and known[i][0] is obj:
                    items.append(known[i])
                else:
                    t, b = serde.dumps_typed(obj)
                    items.append((obj, pack_pair(t, b)))
            data = array_header(len(items)) + b"".join(p for _, p in items)
            sub.append(blob_entry(write, data, was))
            if self._share:
                self._chunks.put(sub[-1][1], tuple(items))
        return list_entry(write, sub, old)


def channel_values(store: GitCheckpointStore, sha: str, serde: SerializerProtocol | None = None) -> dict[str, Any]:
    """The decoded channel values of the LangGraph checkpoint in commit ``sha``, for people
    reading a repository through a plain store (``qvc show`` / ``qvc diff``). ``serde`` (anything
    with LangGraph's ``loads_typed``) defaults to LangGraph's own serializer. Raises
    :class:`~qvc.errors.CorruptionError`."""
    if serde is None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        serde = JsonPlusSerializer()
    state = store.read(sha).checkpoint.state_data
    modes = {decode_name(n): mode for n, (mode, _) in store.tree_entries(sha).items()}
    try:
        return {name: ([serde.loads_typed((t, b)) for t, b in value] if is_chunked(modes.get(name, 0))
                       else serde.loads_typed((value[0], value[1])))
                for name, value in state.items()}
    except (TypeError, ValueError, IndexError) as exc:
        raise CorruptionError(f"checkpoint {sha[:12]}: a channel does not decode: {exc}") from None
