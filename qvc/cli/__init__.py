"""The ``qvc`` command line: a thin click shell over the library.

Every command is a library call (:mod:`qvc.store`, :mod:`qvc.store.revisions`, :mod:`qvc.readers.log`,
:mod:`qvc.readers.statediff`, :mod:`qvc.readers.workdir`, :mod:`qvc.readers.fsck`,
:mod:`qvc.readers.status`, :mod:`qvc.runs`, :mod:`qvc.remotes`, ...); the command modules only parse
arguments and print. Errors are one line on stderr with a distinct exit status (see :data:`EXIT_CODES`);
``--json`` output is stable and documented in docs/cli.md.

Modules: :mod:`~qvc.cli.app` (the group, global options, session, exit statuses, :func:`main`,
:func:`run`), :mod:`~qvc.cli.output` (printing), and one module per group of commands, each adding
its commands to :data:`cli` when imported here. Library imports inside the commands are deferred
for start-up speed: ``qvc --help`` or ``qvc log`` never load what other commands need.
"""

# The command modules: importing one adds its commands to `cli` (`qvc --help` lists them in the
# order of qvc.cli.app.ORDER). None of them imports this package's names back.
from qvc.cli import (  # noqa: F401
    changes,  # diff
    completion,  # completion
    following,  # watch, log --follow
    history,  # log, show, blame
    maintenance,  # gc, fsck
    remotes,  # remote, push, fetch, clone
    repository,  # init, status
    runs,  # runs, timeline
    searching,  # bisect
    serving,  # serve
    tags,  # tag
    threads,  # branch, checkout, reset, reflog
    workdir,  # checkout --to, commit
)
from qvc.cli.app import (
    EXIT_CODES,
    EXIT_CONFLICT,
    EXIT_CORRUPT,
    EXIT_DURABILITY,
    EXIT_ERROR,
    EXIT_NOT_A_REPO,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    cli,
    exit_code,
    main,
    run,
)
from qvc.readers.dates import ago

__all__ = ["EXIT_CODES", "EXIT_CONFLICT", "EXIT_CORRUPT", "EXIT_DURABILITY", "EXIT_ERROR", "EXIT_NOT_A_REPO",
           "EXIT_NOT_FOUND", "EXIT_USAGE", "ago", "cli", "exit_code", "main", "run"]
