"""qvc's logger (``logging.getLogger("qvc")``), with :mod:`logging` imported at its first use.

Warnings qvc cannot raise (a store repaired on open, a damaged object skipped) go to this logger;
without a handler of the program's, Python prints them on stderr. A command that logs nothing never
loads :mod:`logging` (start-up speed: it costs as much as a small read). Imports only the standard
library (layer 0).
"""

from __future__ import annotations

from typing import Any


class _Logger:
    """Stands for the ``qvc`` logger: every attribute is the real logger's, looked up at use."""

    def __getattr__(self, name: str) -> Any:
        import logging  # deferred: see the module docstring

        return getattr(logging.getLogger("qvc"), name)


#: the ``qvc`` logger (``log.warning(...)``, ``log.isEnabledFor(...)``, ...)
log: Any = _Logger()
