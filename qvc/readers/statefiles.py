"""A checkpoint state as a directory of human-editable JSON files, losslessly.

:func:`write_state` writes one pretty JSON file per field, plus a manifest
(:data:`MANIFEST`, ``.qvc-state.json``) mapping each field name to its file name, holding
caller metadata and the SHA-256 digest of every field file as written (:func:`local_changes`
compares them, so edits are never overwritten unawares). :func:`read_state` reads the
directory back, after a person may have edited values, deleted field files (the field is
dropped) or added ``*.json`` files (a new field named by decoding the file name). For every
value :mod:`qvc.codec.serde` round-trips, reading back what was written gives the same value,
types included (``serde.dumps`` of both is identical).

Each file holds one value in the lossless tagged JSON of :mod:`qvc.codec.tagged` (plain JSON
where it is exact, ``{"$tuple": [...]}``-style tags elsewhere), indented, with a short list of
strings, numbers, booleans and nulls on one line (``"id": ["langchain", "schema", ...]``).

File names: a field name is percent-encoded (UTF-8) for every character outside
``[a-z0-9_-]`` -- upper case letters and ``.`` included, so names cannot escape the directory
(``..``, ``/``, ``\\``, NUL) and cannot collide on case-insensitive or normalizing filesystems.
The empty name is ``%.json``; Windows device names (``con``...) get their first letter encoded;
encoded names longer than :data:`MAX_STEM` are cut and suffixed ``~<sha256 prefix>``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Mapping
from typing import Any, List, Tuple

from qvc.codec.tagged import dumps_tagged, loads_tagged
from qvc.errors import InvalidInputError, StorageError

#: The manifest's file name inside a state directory.
MANIFEST = ".qvc-state.json"
#: The manifest's ``format`` value.
FORMAT = "qvc-state/1"
#: The longest encoded file name stem (without ``.json``) kept whole; longer ones are hashed.
MAX_STEM = 150
_KEEP = 110  # characters of a too-long stem kept before the ``~hash`` suffix
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_RESERVED = frozenset(["con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))])
_HASHED = re.compile(r"~[0-9a-f]{20}\Z")
# A JSON scalar as json.dumps writes it (a string holds no raw newline: every "[" followed by a
# newline is structural), and a multi-line array of them, to be put on one line.
_SCALAR = r'(?:"(?:[^"\\\n]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)'
_SCALARS = re.compile(r"\[\n(?P<pad> +)(?P<items>(?:" + _SCALAR + r",\n(?P=pad))*" + _SCALAR + r")\n *\]")
_INLINE = 72  # the longest array put on one line


# -- file names ----------------------------------------------------------------------------------


def field_filename(field: str) -> str:
    """The file name (``<stem>.json``) for ``field``: safe, injective, case-insensitive-proof.

    Raises :class:`InvalidInputError` if ``field`` is not a str or not valid Unicode.
    """
    if type(field) is not str:
        raise InvalidInputError(f"field names must be str, not {type(field).__name__}")
    try:
        field.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"field name {field!r} is not valid Unicode") from None
    stem = "".join(ch if ch in _SAFE else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in field)
    if not stem:
        stem = "%"
    elif stem in _RESERVED:
        stem = f"%{ord(stem[0]):02X}{stem[1:]}"
    if len(stem) > MAX_STEM:
        cut = stem[:_KEEP]
        pct = cut.rfind("%", len(cut) - 2)
        if pct >= 0:  # do not split a %XX escape
            cut = cut[:pct]
        stem = cut + "~" + hashlib.sha256(field.encode("utf-8")).hexdigest()[:20]
    return stem + ".json"


def field_from_filename(name: str) -> str:
    """Decode a field file name back to its field name (for ``*.json`` files a person added).

    Characters other than ``%XX`` escapes stand for themselves, so ``my notes.json`` is the
    field ``my notes``. Raises :class:`InvalidInputError` for names that are not ``*.json``,
    hidden, have a bad ``%`` escape or invalid UTF-8, or were shortened with a hash suffix.
    """
    _check_plain_name(name, "file name")
    stem = name[:-5]
    if stem == "%":
        return ""
    if _HASHED.search(stem):
        raise InvalidInputError(f"{name}: a shortened field file name; its field name cannot be recovered")
    out = bytearray()
    i = 0
    while i < len(stem):
        ch = stem[i]
        if ch == "%":
            hexits = stem[i + 1:i + 3]
            if len(hexits) != 2 or not all(c in "0123456789abcdefABCDEF" for c in hexits):
                raise InvalidInputError(f"{name}: bad percent escape at character {i + 1}")
            out.append(int(hexits, 16))
            i += 3
        else:
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{name}: percent escapes are not valid UTF-8") from None


def _check_plain_name(name: Any, what: str) -> None:
    if not isinstance(name, str):
        raise InvalidInputError(f"{what} must be a string, not {type(name).__name__}")
    bad = (not name.endswith(".json") or name.startswith(".") or any(c in name for c in "/\\\0")
           or len(name.encode("utf-8", "surrogateescape")) > 255)
    if bad:
        raise InvalidInputError(f"{what} {name!r} is not a plain *.json file name inside the state directory")


def field_text(value: Any, path: str = "value") -> str:
    """The text of a field file holding ``value``: :func:`~qvc.codec.tagged.dumps_tagged`'s, with
    each array of scalars that fits in :data:`_INLINE` characters on one line (the same JSON).
    Raises :class:`~qvc.errors.SerializationError` naming ``path``."""

    def inline(m: re.Match) -> str:
        one = "[" + ", ".join(item.strip() for item in m.group("items").split(",\n")) + "]"
        return one if len(one) <= _INLINE else m.group(0)

    return _SCALARS.sub(inline, dumps_tagged(value, path))


def _is_field_file(name: str) -> bool:
    return name.endswith(".json") and not name.startswith(".")


# -- directory I/O -------------------------------------------------------------------------------


def _open_dir(directory: Any) -> int:
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InvalidInputError(f"{os.fspath(directory)}: no such directory") from None
    except NotADirectoryError:
        raise InvalidInputError(f"{os.fspath(directory)}: not a directory") from None
    except OSError as exc:
        raise InvalidInputError(f"{os.fspath(directory)}: {exc.strerror}") from None


def _read_text(dfd: int, name: str, label: str, files: dict | None = None, field: str = "") -> str:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags, dir_fd=dfd)
    except OSError as exc:
        try:
            is_link = stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode)
        except OSError:
            is_link = False
        if is_link:
            raise InvalidInputError(f"{label}: is a symbolic link; refusing to follow it") from None
        raise InvalidInputError(f"{label}: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InvalidInputError(f"{label}: not a regular file")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if files is not None:
        files[name] = (field, _digest(data))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{label}: not UTF-8 text (byte {exc.start})") from None


def _write_temp(dfd: int, data: bytes) -> str:
    """``data`` in a new fsynced temporary file in the directory; its name (removed on failure)."""
    tmp = f".qvc-tmp-{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o666,
                 dir_fd=dfd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise
    return tmp


def _write_atomic(dfd: int, name: str, data: bytes) -> None:
    tmp = _write_temp(dfd, data)
    try:
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a symlink itself, never its target
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise


def _load_manifest(dfd: int, directory: str) -> Tuple[List[Tuple[str, str]], dict]:
    fields, meta, _ = _load_manifest_digests(dfd, directory)
    return fields, meta


def _load_manifest_digests(dfd: int, directory: str) -> Tuple[List[Tuple[str, str]], dict, dict]:
    label = os.path.join(directory, MANIFEST)
    data = loads_tagged(_read_text(dfd, MANIFEST, label), label)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidInputError(f"{label}: not a qvc state manifest (expected \"format\": \"{FORMAT}\")")
    fields, meta = data.get("fields"), data.get("meta", {})
    if not isinstance(fields, dict) or not isinstance(meta, dict):
        raise InvalidInputError(f'{label}: "fields" and "meta" must be objects')
    seen = set()
    for field, fname in fields.items():
        if type(field) is not str:
            raise InvalidInputError(f"{label}: field names must be strings")
        _check_plain_name(fname, f"{label}: file name for field {field!r}")
        if fname in seen:
            raise InvalidInputError(f"{label}: file {fname!r} is listed for two fields")
        seen.add(fname)
    digests = data.get("digests")
    return list(fields.items()), meta, digests if isinstance(digests, dict) else {}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_text(files: Mapping[str, str], digests: Mapping[str, str], meta: Mapping[str, Any] | None) -> bytes:
    manifest = {
        "format": FORMAT,
        "about": "qvc state: one JSON file per field; edit, delete or add *.json files, then read it back",
        "meta": dict(meta or {}),
        "fields": dict(files),
        "digests": dict(digests),
    }
    return dumps_tagged(manifest, "meta").encode("utf-8")


def _read_bytes(dfd: int, name: str) -> bytes | None:
    """The bytes of regular file ``name`` (no symlink followed), ``None`` if it is not one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def local_changes(directory: str | os.PathLike) -> List[str]:
    """The field files of a state directory that differ from what qvc last wrote or stored there.

    The manifest records a SHA-256 digest of every field file as :func:`write_state` wrote it
    (and as :func:`record_state` found it after a commit). Listed, sorted: files changed,
    deleted (a field dropped) or added (``*.json`` files not in the manifest: :func:`untracked_files`),
    and files of a manifest written before digests were kept (qvc cannot tell whether they were
    edited). An empty list for a directory that is missing, empty or holds no manifest (nothing
    of qvc's to overwrite there: :func:`write_state` refuses such a directory on its own). Raises
    :class:`InvalidInputError` for a manifest that does not parse.
    """
    edited, added = _changes(directory)
    return sorted(edited | added)


def untracked_files(directory: str | os.PathLike) -> List[str]:
    """The ``*.json`` files of a state directory that qvc did not write (its manifest does not
    list them), sorted: fields a person added, or files of their own. :func:`write_state` keeps
    them, as git keeps untracked files; :func:`read_state` reads them as added fields. Empty
    where :func:`local_changes` is."""
    return sorted(_changes(directory)[1])


def _changes(directory: str | os.PathLike) -> Tuple[set, set]:
    """``(listed files edited or deleted, files not listed)`` of a state directory (see :func:`local_changes`)."""
    path = os.fspath(directory)
    if not os.path.isdir(path):
        return set(), set()
    dfd = _open_dir(path)
    try:
        entries = set(os.listdir(dfd))
        if MANIFEST not in entries:
            return set(), set()
        fields, _, digests = _load_manifest_digests(dfd, path)
        listed = {fname for _, fname in fields}
        edited = set()
        for fname in listed:
            if fname not in entries:
                edited.add(fname)
                continue
            data = _read_bytes(dfd, fname)
            if data is None or not isinstance(digests.get(fname), str) or _digest(data) != digests[fname]:
                edited.add(fname)
        added = {e for e in entries if _is_field_file(e) and e not in listed
                 and not stat.S_ISDIR(os.stat(e, dir_fd=dfd, follow_symlinks=False).st_mode)}
        return edited, added
    finally:
        os.close(dfd)


def record_state(directory: str | os.PathLike, files: Mapping[str, Tuple[str, str]],
                 meta: Mapping[str, Any]) -> None:
    """Rewrite the manifest of ``directory`` so it describes the files as :func:`read_state` read
    them (``files``: what its ``files`` argument received) with metadata ``meta``: after those
    files were stored, they are no longer local changes (:func:`local_changes`) and ``meta`` names
    what they now are (a commit names the new checkpoint, so the next commit builds on it).

    Only the manifest is replaced (atomically, fsynced); field files are left as they are.
    Raises :class:`InvalidInputError` if the directory cannot be written.
    """
    path = os.fspath(directory)
    text = _manifest_text({field: fname for fname, (field, _) in files.items()},
                          {fname: digest for fname, (_, digest) in files.items()}, meta)
    dfd = _open_dir(path)
    try:
        try:
            _write_atomic(dfd, MANIFEST, text)
            os.fsync(dfd)
        except OSError as exc:
            raise StorageError(f"{path}: cannot write {MANIFEST}: {exc.strerror or exc}", exc.errno, path) from None
    finally:
        os.close(dfd)


def write_state(state: Mapping[str, Any], directory: str | os.PathLike, *,
                meta: Mapping[str, Any] | None = None) -> List[str]:
    """Write ``state`` into ``directory`` as one JSON file per field plus the manifest.

    ``directory`` is created if missing. If it exists it must be empty or hold a manifest
    (written here before); otherwise :class:`InvalidInputError`, so user files are never
    clobbered. When rewriting, the field files the manifest listed (qvc wrote them) that are no
    longer part of the state are removed; every other file is kept, ``*.json`` files qvc did not
    write included (:func:`untracked_files`: as git keeps untracked files, unless the state has a
    file of the same name, which replaces it).
    Every value is encoded before anything is written, so a :class:`SerializationError` leaves
    the directory untouched; so does a full disk or another I/O error (every file is written
    aside before any is replaced; a directory created for the write is removed again), raised
    as :class:`~qvc.errors.StorageError` keeping the errno. Each file is replaced atomically
    (temp file, fsync, rename) and symlinks are never followed. Returns the field file names
    written, in field order (the manifest, :data:`MANIFEST`, is written last and not listed).
    """
    if not isinstance(state, Mapping):
        raise InvalidInputError(f"state must be a mapping, not {type(state).__name__}")
    if meta is not None and not isinstance(meta, Mapping):
        raise InvalidInputError(f"meta must be a mapping, not {type(meta).__name__}")
    files: dict = {}
    texts = []
    folded: dict = {}
    for field, value in state.items():
        fname = field_filename(field)
        if fname.casefold() in folded:  # pragma: no cover - the encoding is injective and case-proof
            raise InvalidInputError(f"fields {folded[fname.casefold()]!r} and {field!r} map to the same file")
        folded[fname.casefold()] = field
        files[field] = fname
        texts.append((fname, field_text(value, f"state[{field!r}]").encode("utf-8")))
    manifest_text = _manifest_text(files, {fname: _digest(data) for fname, data in texts}, meta)

    path = os.fspath(directory)
    created = not os.path.lexists(path)
    if not created and not os.path.isdir(path):
        raise InvalidInputError(f"{path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{path}: cannot create directory: {exc.strerror or exc}", exc.errno, path) from None
    dfd = _open_dir(path)
    temps: list[tuple[str, str]] = []
    done = False
    try:
        entries = os.listdir(dfd)
        listed: set = set()  # the field files qvc wrote there before
        if entries and not created:
            if MANIFEST not in entries:
                raise InvalidInputError(f"{path}: directory is not empty and was not written by qvc; "
                                        "choose an empty or new directory")
            listed = {fname for _, fname in _load_manifest(dfd, path)[0]}  # it must really be ours
        try:
            # Every file is written aside first: a full disk fails here, before anything changed.
            for fname, data in [*texts, (MANIFEST, manifest_text)]:
                temps.append((_write_temp(dfd, data), fname))
            for tmp, fname in temps[:-1]:
                os.replace(tmp, fname, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a symlink itself, never its target
            wanted = set(files.values())
            for entry in entries:
                if entry in listed and entry not in wanted:
                    if stat.S_ISDIR(os.stat(entry, dir_fd=dfd, follow_symlinks=False).st_mode):
                        continue
                    os.unlink(entry, dir_fd=dfd)
            os.replace(temps[-1][0], MANIFEST, src_dir_fd=dfd, dst_dir_fd=dfd)
            temps.clear()
            done = True
            os.fsync(dfd)
        except OSError as exc:
            raise StorageError(f"{path}: cannot write state: {exc.strerror or exc}", exc.errno, path) from None
    finally:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
        os.close(dfd)
        if created and not done:
            with contextlib.suppress(OSError):
                os.rmdir(path)  # made here for this write, which failed: leave nothing behind
    return list(files.values())


def read_state(directory: str | os.PathLike, *, files: dict | None = None) -> Tuple[dict, dict]:
    """Read a directory written by :func:`write_state` back: ``(state, meta)``.

    ``files``, when given, receives ``{file name: (field, SHA-256 hex digest of the bytes read)}``
    for every field read (what :func:`record_state` takes).

    Fields keep the manifest's order; a field whose file was deleted is absent; a ``*.json``
    file not in the manifest becomes a new field (after the others, by file name) named by
    :func:`field_from_filename`. Raises :class:`InvalidInputError` for a missing or crafted
    manifest (file names must be plain ``*.json`` names inside the directory), invalid JSON or
    malformed tags (naming the file and line), symlinks and non-regular files.
    """
    path = os.fspath(directory)
    dfd = _open_dir(path)
    try:
        try:
            entries = set(os.listdir(dfd))
        except OSError as exc:
            raise InvalidInputError(f"{path}: {exc.strerror}") from None
        if MANIFEST not in entries:
            raise InvalidInputError(f"{path}: no {MANIFEST}; not a directory written by qvc")
        fields, meta = _load_manifest(dfd, path)
        names = {field for field, _ in fields}
        state: dict = {}
        for field, fname in fields:
            if fname in entries:
                label = os.path.join(path, fname)
                state[field] = loads_tagged(_read_text(dfd, fname, label, files, field), label)
        listed = {fname for _, fname in fields}
        for fname in sorted(e for e in entries if _is_field_file(e) and e not in listed):
            label = os.path.join(path, fname)
            field = field_from_filename(fname)
            if field in names or field in state:
                raise InvalidInputError(f"{label}: names field {field!r}, which the manifest maps to another file")
            state[field] = loads_tagged(_read_text(dfd, fname, label, files, field), label)
        return state, meta
    finally:
        os.close(dfd)
