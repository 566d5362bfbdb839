"""Finding the repository a command is about, the way git finds ``.git``."""

from __future__ import annotations

import os
from typing import Mapping

from qvc.errors import NotARepositoryError

DEFAULT_NAME = ".qvc"


def is_repository(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like a qvc repository (a bare git repository with a ``qvc/`` folder)."""
    p = os.fspath(path)
    return (os.path.isfile(os.path.join(p, "HEAD")) and os.path.isdir(os.path.join(p, "objects"))
            and os.path.isdir(os.path.join(p, "qvc")))


def find_repository(start: str | os.PathLike | None = None, *, explicit: str | os.PathLike | None = None,
                    environ: Mapping[str, str] | None = None) -> str:
    """The repository to use: ``explicit`` if given, else ``$QVC_DIR``, else ``.qvc`` in
    ``start`` (default: the current directory) or its nearest parent that has one (or the
    enclosing repository when ``start`` is inside one). Returns an absolute path.

    Raises :class:`NotARepositoryError` when there is none.
    """
    env = os.environ if environ is None else environ
    for given, what in ((explicit, "--repo"), (env.get("QVC_DIR") or None, "$QVC_DIR")):
        if given is not None:
            path = os.path.abspath(os.fspath(given))
            if not is_repository(path):
                raise NotARepositoryError(f"{path} ({what}) is not a qvc repository")
            return path
    here = os.path.abspath(os.fspath(start) if start is not None else os.getcwd())
    while True:
        if is_repository(os.path.join(here, DEFAULT_NAME)):
            return os.path.join(here, DEFAULT_NAME)
        if is_repository(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            raise NotARepositoryError("not a qvc repository (or any of the parent directories): "
                                      "run `qvc init`, or name one with -C DIR, --repo PATH or $QVC_DIR")
        here = parent
