"""Thread ids <-> git ref names, and the ref namespaces qvc uses.

Layout of refs in a qvc repository::

    refs/heads/<thread>                     the thread's head (one branch per thread)
    refs/tags/<name>                        a tag on a checkpoint (``qvc tag``; the name as typed)
    refs/qvc/superseded/<thread>/<sha>      a line left behind by time travel (kept reachable)
    refs/qvc/writes/<sha>                   pending writes attached to checkpoint commit <sha>
    refs/remotes/<remote>/<thread>          a remote's thread, as last fetched or pushed
    refs/qvc/remotes/<remote>/<namespace>/  the remote's superseded lines, pending writes and notes

``<thread>`` is the thread id with every character outside ``[a-z0-9_-]`` written as ``%XX``
per UTF-8 byte. The encoding is reversible, is one path component (so ``a`` and ``a/b`` never
clash), and has no upper-case letters (so ``A`` and ``a`` never clash on case-insensitive file
systems). Ids whose encoding would pass 200 bytes keep a readable prefix followed by ``%%``
and a hash of the whole id; the full id is then read from the head commit.
"""

from __future__ import annotations

from qvc.errors import InvalidInputError, InvalidThreadIdError
from qvc.lazy import Pattern

HEADS = "refs/heads/"
TAGS = "refs/tags/"
SUPERSEDED = "refs/qvc/superseded/"
WRITES = "refs/qvc/writes/"
NOTES = "refs/notes/"
REMOTES = "refs/remotes/"
REMOTE_QVC = "refs/qvc/remotes/"
#: where a fetch into a repository that requires signatures puts what arrived until it verifies
INCOMING = "refs/qvc/incoming/"
#: the records of history rewrites (:class:`qvc.store.rewrite.RewriteLog`): one chain of commits,
#: one per rewrite, per repository that rewrote (``refs/qvc/rewrites/<its id>``: replicas that push
#: to one server keep theirs apart)
REWRITES = "refs/qvc/rewrites/"
#: What a remote's name may be (``qvc remote add NAME``): it is one component of the refs above.
REMOTE_NAME = Pattern(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPE_RUN = Pattern(r"(?:%[0-9A-F]{2})+")
MAX_ENCODED = 200
#: the longest file name (in bytes) file systems take: a tag name's parts are file names
MAX_COMPONENT = 255
_LONG_MARK = "%%"


def _encode(text: str) -> str:
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")) for c in text)


#: the longest name a message shows whole; a longer one is cut, its length said
SHOWN = 60


def encodable(text: str) -> bool:
    """Whether ``text`` is valid Unicode that UTF-8 encodes: not so when it holds lone surrogates,
    which is how Python reads command-line bytes that are not UTF-8 (a Latin-1 terminal's)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(name: str) -> str:
    """``name`` quoted for a message (``repr``), its start only when it is longer than :data:`SHOWN`
    characters (a name typed on a command line may be thousands long)."""
    if len(name) <= SHOWN:
        return repr(name)
    return f"{name[:SHOWN - 20]!r}... ({len(name)} characters)"


def check_thread_id(thread_id: object) -> str:
    """Return ``thread_id`` if it can name a thread, else raise :class:`InvalidThreadIdError`."""
    if not isinstance(thread_id, str):
        raise InvalidThreadIdError(f"thread id must be a string, not {type(thread_id).__name__}")
    if not thread_id:
        raise InvalidThreadIdError("thread id must not be empty")
    return thread_id


_BAD_CHARS = frozenset(" ~^:?*[\\\x7f") | frozenset(chr(c) for c in range(32))


def branch_name_problem(name: str) -> str | None:
    """Why ``git check-ref-format --branch`` would refuse ``name`` as a branch name, or ``None``.

    What the command line holds thread names typed by people to (the library takes any thread
    id: LangGraph and agno ids are arbitrary strings, and refs encode them): no control
    character, space, ``~ ^ : ? * [ \\``, ``..``, ``@{``, ``//``; not ``@`` or ``HEAD``; no leading
    ``-`` or ``/``, no trailing ``/`` or ``.``; no component starting with ``.`` or ending with ``.lock``;
    valid UTF-8 (no lone surrogates, which is how Python reads bytes of another encoding).
    """
    if not name:
        return "it is empty"
    if not encodable(name):
        return "it is not valid UTF-8"
    bad = sorted({c for c in name if c in _BAD_CHARS})
    if bad:
        shown = ", ".join(repr(c) if c.isprintable() and c != " " else
                          ("space" if c == " " else repr(c)) for c in bad)
        return f"it contains {shown}"
    for piece, what in (("..", "'..'"), ("@{", "'@{'"), ("//", "'//'")):
        if piece in name:
            return f"it contains {what}"
    if name in ("@", "HEAD"):
        return f"{name!r} is reserved"
    if name.startswith("-"):
        return "it starts with '-'"
    if name.startswith("/") or name.endswith("/"):
        return "it starts or ends with '/'"
    if name.endswith("."):
        return "it ends with '.'"
    for component in name.split("/"):
        if component.startswith("."):
            return "a part of it starts with '.'"
        if component.endswith(".lock"):
            return "a part of it ends with '.lock'"
    return None


def encode_thread(thread_id: str) -> str:
    """The single ref-name component for ``thread_id`` (see the module docstring)."""
    enc = _encode(check_thread_id(thread_id))
    if len(enc) <= MAX_ENCODED:
        return enc
    import hashlib  # deferred: start-up time (`import qvc` loads this module; few ids are this long)

    digest = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    keep, out = MAX_ENCODED - len(digest) - len(_LONG_MARK), ""
    for c in thread_id:  # cut on a character boundary, never inside a %XX run
        piece = _encode(c)
        if len(out) + len(piece) > keep:
            break
        out += piece
    return f"{out}{_LONG_MARK}{digest}"


def encode_pattern(pattern: str) -> str:
    """A ref-name glob for the threads ``pattern`` names: thread-id text with at most one ``*``
    (any run of characters), each side encoded as :func:`encode_thread` encodes ids. Raises
    :class:`InvalidThreadIdError` for an empty pattern or one with two ``*``. (A hashed long id,
    over ``MAX_ENCODED`` bytes encoded, is matched by its readable prefix only.)"""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidThreadIdError("a thread pattern must be a non-empty string")
    if pattern.count("*") > 1:
        raise InvalidThreadIdError(f"thread pattern {pattern!r}: git refspecs allow one '*'")
    return "*".join(_encode(part) for part in pattern.split("*"))


def decode_thread(component: str) -> str | None:
    """The thread id a component encodes, or ``None`` for a hashed long id or a component that is
    no encoding of ours (undecodable escapes, e.g. written by another tool): read it from the commit."""
    if _LONG_MARK in component:
        return None
    try:
        return _ESCAPE_RUN.sub(
            lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode("utf-8", "surrogatepass"), component
        )
    except UnicodeDecodeError:  # no encoding of ours (a ref another tool wrote): read it from the commit
        return None


def head_ref(thread_id: str) -> str:
    return HEADS + encode_thread(thread_id)


def tag_ref(name: str) -> str:
    """``refs/tags/<name>`` for a tag name git would take (:func:`branch_name_problem`'s rules);
    else :class:`~qvc.errors.InvalidInputError` saying why. Tag names are not encoded: plain git
    reads them as its own tags; none has a part longer than :data:`MAX_COMPONENT` bytes, as a
    ref's parts are file names."""
    problem = branch_name_problem(name) if isinstance(name, str) else "it is not a string"
    if problem is None and any(len(part.encode("utf-8")) > MAX_COMPONENT for part in name.split("/")):
        problem = f"a part of it is longer than {MAX_COMPONENT} bytes (a file name's limit)"
    if problem is not None:
        raise InvalidInputError(f"{shown(name)} is not a valid tag name: {problem} (git's ref name rules)")
    return TAGS + name


def superseded_prefix(thread_id: str) -> str:
    return f"{SUPERSEDED}{encode_thread(thread_id)}/"


def writes_ref(commit_hex: str) -> str:
    return WRITES + commit_hex


_PLAIN_NAME = Pattern(r"[^%/\\\x00-\x1f\x7f.][^%/\\\x00-\x1f\x7f]*")


def encode_name(name: str) -> str:
    """A git tree entry name for a state field: readable, reversible, never ``.``-led or ``/``-bearing."""
    if _PLAIN_NAME.fullmatch(name):  # the usual field name: nothing to escape
        return name
    out = []
    for i, c in enumerate(name):
        if c in "%/\\" or ord(c) < 32 or ord(c) == 127 or (i == 0 and c == "."):
            out.append("".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass")))
        else:
            out.append(c)
    return "".join(out) or "%"


def decode_name(entry: str) -> str:
    if "%" not in entry:
        return entry
    if entry == "%":
        return ""
    return _ESCAPE_RUN.sub(lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode("utf-8", "surrogatepass"), entry)


def tracking_ref(remote: str, thread: str) -> str | None:
    """The remote-tracking ref of ``thread`` on ``remote`` (``refs/remotes/<remote>/<thread>``),
    ``None`` if ``remote`` is not a valid remote name."""
    if not REMOTE_NAME.match(remote):
        return None
    return f"{REMOTES}{remote}/{encode_thread(thread)}"
