"""The ``qvc`` command line: a thin click shell over the library.

Every command is a library call (:mod:`qvc.store`, :mod:`qvc.store.revisions`, :mod:`qvc.readers.log`,
:mod:`qvc.readers.statediff`, :mod:`qvc.readers.workdir`, :mod:`qvc.readers.fsck`,
:mod:`qvc.readers.status`, :mod:`qvc.runs`, :mod:`qvc.remotes`, ...); the command modules only parse
arguments and print. Errors are one line on stderr with a distinct exit status (see :data:`EXIT_CODES`);
``--json`` output is stable and documented in docs/cli.md.

Modules: :mod:`~qvc.cli.app` (the group, global options, session, exit statuses, :func:`main`,
:func:`run`), :mod:`~qvc.cli.output` (printing), and one module per group of commands, each adding
its commands to :data:`cli` when imported (on first use of one of its commands). Library imports
inside the commands are deferred for start-up speed: ``qvc log`` never loads what other commands need.
"""

# The command modules (qvc.cli.history, ...) are imported on first use by the group
# (qvc.cli.app.LazyGroup), so `qvc log` loads the one module it needs. The names below come from
# qvc.cli.app on first read: the console script (run) turns collection off before click loads.
import gc

from qvc.lazy import exports

__all__ = ["EXIT_CODES", "EXIT_CONFLICT", "EXIT_CORRUPT", "EXIT_DURABILITY", "EXIT_ERROR", "EXIT_NOT_A_REPO",
           "EXIT_NOT_FOUND", "EXIT_SIGNATURE", "EXIT_USAGE", "ago", "cli", "exit_code", "main", "run"]


def run() -> None:
    """The console script (:func:`qvc.cli.app.run`), with cyclic collection off from before
    click and the command line load: their imports make thousands of objects and no garbage, and
    collections walking them cost 1.5 to 2.5 ms of a reading command (docs/benchmarks.md)."""
    gc.disable()
    from qvc.cli.app import run as run_app  # deferred: loaded with collection off

    run_app()


_HOMES = {name: "qvc.cli.app" for name in __all__ if name not in ("ago", "run")}
_HOMES["ago"] = "qvc.readers.dates"  # kept here for callers of the former re-export
__getattr__, __dir__ = exports(__name__, _HOMES)
