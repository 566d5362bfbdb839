"""The typed errors qvc raises.

Every error qvc raises on purpose derives from :class:`QvcError`, so callers can catch the
family with one clause. Messages name the thing (thread, checkpoint, field path, file) that
is wrong.
"""

from __future__ import annotations

import errno as _errno
import os


class QvcError(Exception):
    """Base class of every error qvc raises."""


class NotARepositoryError(QvcError):
    """The path is not a qvc repository (and was not to be created)."""


class StoreClosedError(QvcError):
    """The store (or repository) was closed; open a new one."""


class NotFoundError(QvcError, LookupError):
    """Something named by the caller does not exist."""


class UnknownThreadError(NotFoundError):
    """The thread has no checkpoints."""


class UnknownCheckpointError(NotFoundError):
    """No checkpoint has that id, commit SHA or prefix (also used for an unknown ``before``)."""


class InvalidInputError(QvcError, ValueError):
    """The caller passed a value qvc cannot accept (bad thread id, bad argument, bad state)."""


class InvalidThreadIdError(InvalidInputError):
    """A thread id that cannot be stored (not a string, or empty)."""


class SerializationError(InvalidInputError, TypeError):
    """A state value cannot be serialized; the message names its field path."""


class CheckpointConflictError(QvcError):
    """A concurrent writer moved the thread, or an id was re-put with different content."""


class CorruptionError(QvcError):
    """Stored data failed to decode or verify; the message names the object or file."""


#: the repair of objects that are missing or unreadable (a lost or truncated pack), for messages:
#: what restores them, rather than deleting the threads that need them
OBJECTS_REPAIR = ("`qvc fetch --refetch REMOTE` then `qvc gc` restores lost objects from a remote that has them "
                  "(`qvc fsck` names what is damaged)")


class DamagedRefError(CorruptionError):
    """A ref's file holds no ref (garbage text, a file another program left under ``refs/``);
    ``ref`` names it (``refs/heads/<thread>``). Listings skip such a ref, as git does;
    ``qvc fsck --repair`` moves the file aside and restores the ref from its reflog."""

    def __init__(self, message: str, ref: str):
        super().__init__(message)
        self.ref = ref


class LocalChangesError(QvcError):
    """Writing would overwrite changes the user made (edited state files); ``files`` lists them."""

    def __init__(self, message: str, files: list[str]):
        super().__init__(message)
        self.files = files


class StorageError(QvcError, OSError):
    """The file system failed a read or write (full disk, I/O error, permissions).

    An :class:`OSError` too, keeping ``errno`` (``None`` when the cause did not tell),
    ``strerror`` and ``filename``; its message is one line naming the path. What was
    acknowledged before stays stored, and writing works again once the cause is gone.
    """

    def __init__(self, message: str, errno: int | None = None, filename: str | None = None):
        if errno is None:
            super().__init__(message)
        else:
            super().__init__(errno, os.strerror(errno), filename)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def of(cls, exc: BaseException, path: str, what: str = "cannot write") -> StorageError:
        """The :class:`StorageError` for ``exc`` (an :class:`OSError`, or a libgit2 error whose text
        carries the system's message): ``"<path>: <what>: <reason>"``, the errno kept or recovered."""
        code = getattr(exc, "errno", None)
        text = getattr(exc, "strerror", None) or str(exc)
        if not isinstance(code, int):
            code = errno_in(str(exc))
        reason = os.strerror(code) if code is not None else text
        return cls(f"{path}: {what}: {reason}", code, getattr(exc, "filename", None) or path)


def errno_in(text: str) -> int | None:
    """The errno whose system message ``text`` contains (libgit2 reports errors as text), or ``None``."""
    found = [(len(os.strerror(code)), code) for code in _errno.errorcode if os.strerror(code) in text]
    return max(found)[1] if found else None


class DurabilityError(QvcError):
    """A background flush failed; raised on the next call, on ``flush()`` or ``close()``."""


class SignatureError(QvcError):
    """A signature is required and cannot be made (the repository requires signed checkpoints and
    the store has no usable signing key), or history does not verify (``qvc verify``: a checkpoint
    unsigned, badly signed, or signed by a key not allowed at its time)."""


class AmbiguousNameError(InvalidInputError):
    """A name (checkpoint id prefix, SHA prefix) matches more than one checkpoint."""


class UnknownRunError(NotFoundError):
    """No run (or session) has that id."""


class RunStateError(QvcError):
    """The run's status does not allow the operation (continuing a CANCELLED run, recording after finish)."""


class RunOwnedError(RunStateError, CheckpointConflictError):
    """A live process owns the RUNNING run; taking it over is refused."""


class UnknownRemoteError(NotFoundError):
    """No remote has that name (``qvc remote add`` one)."""


class RemoteError(QvcError):
    """Talking to a remote failed as a whole: unreachable, authentication refused, not a repository."""


class RemoteStorageError(RemoteError, StorageError):
    """The remote's file system refused the push: its disk is full (``errno.ENOSPC``, or
    ``EDQUOT`` for a quota); nothing more was stored there. A :class:`StorageError` (exit 1,
    as a full local disk) and a :class:`RemoteError`; ``filename`` is the remote's URL."""


class PushRejectedError(CheckpointConflictError):
    """The push left at least one ref unpushed; ``result`` holds every ref's outcome and reason.

    Refs not rejected were pushed: a rejection never silently drops the others.
    """

    def __init__(self, message: str, result: object):
        super().__init__(message)
        self.result = result
