"""Who may sign a repository's checkpoints: its allowed signers file.

The file is ``<repository>/qvc/allowed_signers`` in ssh-keygen's ALLOWED SIGNERS format, so plain
git checks signatures against it as it is::

    git -c gpg.ssh.allowedSignersFile=REPO/qvc/allowed_signers verify-commit SHA

A signer is added with validity dates (``valid-after``, ``valid-before``); removing one does not
delete its lines but ends their validity now (``valid-before``), so what the key signed while it
was allowed still verifies and nothing it signs later does. Changes are made under a lock and
replace the file whole (written, flushed, renamed), so a reader sees the old file or the new one.
Lines a person wrote by hand (and comments) are kept as they are.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from qvc.errors import InvalidInputError, NotFoundError, StorageError
from qvc.plumbing.durability import fsync_dir

if TYPE_CHECKING:
    from qvc.plumbing.signing import AllowedSigner

#: the file, relative to the repository
FILE = os.path.join("qvc", "allowed_signers")


class Signers:
    """The allowed signers of the repository at ``path`` (a store's :attr:`path`)."""

    def __init__(self, path: str | os.PathLike):
        self.repository = os.fspath(path)
        #: the allowed signers file (it may not exist yet: then nobody may sign)
        self.path = os.path.join(self.repository, FILE)

    def entries(self) -> list[AllowedSigner]:
        """Every line of the file, in order (``[]`` without a file). Raises
        :class:`~qvc.errors.InvalidInputError` naming the file and line of a line that does not parse."""
        if not os.path.exists(self.path):
            return []
        from qvc.plumbing.signing import (
            load_allowed_signers,  # deferred: a reader that checks no signature never loads it
        )

        return load_allowed_signers(self.path)

    def add(self, principal: str, public_key: str, *, valid_after: str | None = None,
            valid_before: str | None = None) -> AllowedSigner:
        """Allow ``principal`` to sign with ``public_key`` (a public key line, as in a ``.pub``
        file), in namespace ``git``, between the optional validity times (``YYYYMMDD[HHMM[SS]]``,
        local time, or suffixed ``Z`` for UTC, as ssh-keygen reads them). Returns the new line.
        Raises :class:`~qvc.errors.InvalidInputError` for a bad key, name or time, or when
        ``principal`` already has that key with the same validity."""
        from qvc.plumbing.signing import AllowedSigner, parse_allowed_signers, ssh_time

        entry = AllowedSigner.for_key(principal, public_key, valid_after=valid_after, valid_before=valid_before,
                                      comment=" ".join(public_key.split()[2:]))
        if valid_after is not None and valid_before is not None and ssh_time(valid_before) <= ssh_time(valid_after):
            raise InvalidInputError(f"valid-before {valid_before} is not after valid-after {valid_after}")

        def change(text: str) -> str:
            for old in parse_allowed_signers(text, self.path):
                if principal in old.principals and old.key == entry.key and \
                        (old.valid_after, old.valid_before) == (valid_after, valid_before):
                    raise InvalidInputError(f"{principal} may already sign with {entry.public_key_line[:40]}...")
            return text + ("\n" if text and not text.endswith("\n") else "") + entry.line() + "\n"

        self._change(change)
        return entry

    def remove(self, principal: str, *, when: float | None = None) -> int:
        """End ``principal``'s right to sign at ``when`` (default now): each of its lines still
        valid then gets ``valid-before`` set to that time (UTC), so commits it signed before stay
        verified. Returns how many lines changed. Raises :class:`~qvc.errors.NotFoundError` when
        no line names ``principal``, :class:`~qvc.errors.InvalidInputError` when none of them is
        valid at ``when`` (removed already)."""
        from qvc.plumbing.signing import AllowedSigner, format_ssh_time, parse_allowed_signers

        at = int(time.time() if when is None else when)
        stamp = format_ssh_time(at)
        changed = 0

        def change(text: str) -> str:
            nonlocal changed
            lines, named = text.splitlines(), False
            for i, line in enumerate(lines):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                entry = parse_allowed_signers(line, self.path)[0]
                if principal not in entry.principals:
                    continue
                named = True
                if entry.valid_before is not None and entry.valid_before_time() <= at:
                    continue  # ended already
                rest = tuple(p for p in entry.principals if p != principal)
                ended = AllowedSigner(entry.principals if not rest else (principal,), entry.key_type, entry.key,
                                      entry.namespaces, entry.valid_after, stamp, entry.cert_authority, entry.comment)
                # a line shared with other principals keeps them as they were and ends for this one only
                lines[i] = ended.line() if not rest else "\n".join(
                    [AllowedSigner(rest, entry.key_type, entry.key, entry.namespaces, entry.valid_after,
                                   entry.valid_before, entry.cert_authority, entry.comment).line(), ended.line()])
                changed += 1
            if not named:
                raise NotFoundError(f"no allowed signer {principal!r} in {self.path}")
            if not changed:
                raise InvalidInputError(f"{principal} may no longer sign already (every key of theirs has ended)")
            return "\n".join(lines) + "\n"

        self._change(change)
        return changed

    def _change(self, change) -> None:
        """Replace the file with ``change(its text)``, under the file's lock; a reader sees the
        old file or the new one, never a part."""
        from filelock import FileLock, Timeout  # deferred: start-up speed (only changes need it)

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        try:
            with FileLock(self.path + ".lock", timeout=10):
                try:
                    with open(self.path, encoding="utf-8") as f:
                        text = f.read()
                except FileNotFoundError:
                    text = ""
                new = change(text)
                tmp = f"{self.path}.tmp-{os.getpid()}"
                try:
                    with open(tmp, "w", encoding="utf-8") as f:
                        f.write(new)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, self.path)
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)  # our own temporary file, left by a failed write
                fsync_dir(os.path.dirname(self.path))
        except Timeout:
            raise StorageError(f"{self.path}: another process holds {self.path}.lock for over 10 s") from None
        except OSError as exc:
            raise StorageError.of(exc, self.path) from None


def describe(entry: AllowedSigner, when: float | None = None) -> dict:
    """One allowed signer as data (``qvc signers list --json``): principals, key, fingerprint,
    namespaces, validity as written, and whether it is valid ``when`` (default now)."""
    from qvc.plumbing.signing import fingerprint

    at = time.time() if when is None else when
    after, before = entry.valid_after_time(), entry.valid_before_time()
    return {"principals": list(entry.principals), "key": entry.public_key_line, "fingerprint": fingerprint(entry.key),
            "namespaces": entry.namespaces, "valid_after": entry.valid_after, "valid_before": entry.valid_before,
            "valid_now": (after is None or after <= at) and (before is None or at <= before)
            and not entry.cert_authority, "comment": entry.comment}

