"""A checkpoint's signature state as data: what ``qvc show``, ``qvc log --show-signature`` and the
page say about it (docs/signing.md).

Light on purpose (every ``qvc show`` asks): an unsigned commit of a repository without allowed
signers is answered without loading the signing code; the rest is checked as ``qvc verify``
checks it (:func:`qvc.plumbing.signing.check_commit`).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from qvc.store.signers import FILE, Signers

if TYPE_CHECKING:
    from qvc.store.git_store import GitCheckpointStore


def signature_reader(store: GitCheckpointStore) -> Callable[[str], dict | None]:
    """A function giving a commit's signature state: ``{"status": "verified" | "unsigned" |
    "bad" | "unknown-key", "principal", "fingerprint", "reason"}``, checked against the allowed
    signers as they are now, at the commit's time; ``None`` for an unsigned commit of a
    repository without allowed signers (nothing to say). The allowed signers are read once."""
    listed = os.path.exists(os.path.join(store.path, FILE))
    allowed: list | None = None

    def state(sha: str) -> dict | None:
        nonlocal allowed
        data = store.repository.read(bytes.fromhex(sha), "commit")
        if not listed and b"\ngpgsig " not in data.partition(b"\n\n")[0]:
            return None
        from qvc.plumbing.signing import check_commit  # deferred: see the module docstring

        if allowed is None:
            allowed = Signers(store.path).entries()
        found = check_commit(data, allowed)
        return {"status": found.status.value, "principal": found.principal, "fingerprint": found.fingerprint,
                "reason": found.reason or None}

    return state
