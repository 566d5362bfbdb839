"""The shell of the ``qvc`` command line: the click group and its global options, the
per-invocation session (which opens the store), names in arguments (resolving and completing
them), and the entry points that turn errors into one line on stderr and an exit status.

Command modules (:mod:`qvc.cli.history`, ...) add their commands to :data:`cli` when imported;
:class:`LazyGroup` imports the one a command needs on first use. No module imports them all up front.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import sys
import threading

import click

from qvc.errors import (
    CheckpointConflictError,
    CorruptionError,
    DurabilityError,
    InvalidInputError,
    NotARepositoryError,
    NotFoundError,
    QvcError,
    SignatureError,
)
from qvc.version import __version__

EXIT_ERROR = 1  # any other failure (git missing, I/O)
EXIT_USAGE = 2  # bad arguments or input
EXIT_NOT_FOUND = 3  # unknown thread, checkpoint, field
EXIT_CONFLICT = 4  # another writer got there first; a name already taken
EXIT_CORRUPT = 5  # damaged repository (also `qvc fsck` finding problems)
EXIT_DURABILITY = 6  # a flush failed
EXIT_SIGNATURE = 7  # a signature required and not made; `qvc verify` finding unverified history
EXIT_NOT_A_REPO = 128  # no repository here (git's "fatal" status)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as git)

EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (NotARepositoryError, EXIT_NOT_A_REPO), (NotFoundError, EXIT_NOT_FOUND), (InvalidInputError, EXIT_USAGE),
    (CheckpointConflictError, EXIT_CONFLICT), (CorruptionError, EXIT_CORRUPT), (DurabilityError, EXIT_DURABILITY),
    (SignatureError, EXIT_SIGNATURE), (QvcError, EXIT_ERROR),
]

#: git's end of the options: every argument after it is an operand, even one starting with `-`
#: (`qvc log --end-of-options -dash -- messages`: `--` still puts field names apart)
END_OF_OPTIONS = "--end-of-options"

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# -- the session -------------------------------------------------------------------------------


class Session:
    """Per-invocation state: where the repository is, output settings, the open store."""

    def __init__(self, repo: str | None, color: str, pager: bool):
        self.repo = repo
        self.color = (color == "always" or color == "auto" and sys.stdout.isatty()
                      and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb")
        self.pager = pager
        self._store = None

    def store(self, write: bool = False):
        """The repository's store, opened on first use (closed when the command ends).

        Reading commands open it read-only: no libgit2 import, no lock, nothing written.
        """
        if self._store is None:
            # deferred for start-up speed (the store layer), as are the library imports in every command
            from qvc.store.discovery import find_repository
            from qvc.store.git_store import GitCheckpointStore

            self._store = GitCheckpointStore(find_repository(explicit=self.repo), create=False, readonly=not write)
        return self._store

    @property
    def opened(self):
        """The store if this command opened it already, else ``None`` (nothing is opened)."""
        return self._store

    def close(self) -> None:
        """Say what the viewers noted while showing values (``hint: ...`` on stderr, each once),
        then close the store."""
        viewers = sys.modules.get("qvc.store.viewers")  # not imported: nothing was shown through one
        for line in viewers.notes() if viewers is not None else ():
            click.echo(f"hint: {line}", err=True)
        if self._store is not None:
            self._store.close()


def session() -> Session:
    """The running command's :class:`Session`."""
    return click.get_current_context().find_object(Session)


# -- names in arguments ------------------------------------------------------------------------


def revision(store, name: str | None):
    """Resolve a revision (default HEAD) for a command; ``RUN@N`` too (:func:`qvc.runs.run_revision`)."""
    from qvc.store.revisions import parse_revision  # deferred: start-up speed

    return parse_revision(store, "HEAD" if name is None else name, names=lambda text: run_names(store, text))


def run_names(store, text: str):
    """``RUN@N`` / ``RUN@CHECKPOINT_ID`` as a revision (``None`` if ``text`` is no run's), for ``names=``."""
    from qvc.runs import run_revision  # deferred: only names no checkpoint has get here

    return run_revision(store, text)


def complete_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    """Shell completion: thread names (and HEAD) of the repository in reach."""
    from click.shell_completion import CompletionItem  # deferred: start-up speed

    try:
        from qvc.store.discovery import find_repository  # deferred: start-up speed
        from qvc.store.git_store import GitCheckpointStore

        root = ctx.find_root().params
        if root.get("chdir"):
            os.chdir(root["chdir"])
        with GitCheckpointStore(find_repository(explicit=root.get("repo")), create=False, readonly=True) as store:
            names = ["HEAD"] + store.threads()
    except (QvcError, OSError):
        return []
    return [CompletionItem(n) for n in names if n.startswith(incomplete)]


# -- the group ---------------------------------------------------------------------------------


# The order of `qvc --help`: reading history, changing it, runs, following, remotes, the rest.
ORDER = ("init", "status", "log", "show", "diff", "blame", "bisect", "branch", "checkout", "switch", "commit", "reset",
         "reflog", "rev-parse", "tag", "verify", "signers", "runs", "timeline", "watch", "remote", "push", "fetch",
         "clone", "serve", "config", "gc", "fsck", "completion")


class Interrupted(Exception):
    """Ctrl-C while a command ran (click would print a blank line for a KeyboardInterrupt)."""


class ReaderLeft(Exception):
    """A write failed with EPIPE while a command ran (`qvc status | head -1`): click would turn
    it into exit 1 itself, before :func:`main` could tell whether it was stdout's reader that left."""

#: The module of :mod:`qvc.cli` that defines each command: a command runs with its own module
#: loaded and no other (start-up speed). A command missing here still runs (every module is
#: loaded to find it), only slower.
COMMANDS = {
    "init": "repository", "status": "repository", "rev-parse": "repository", "config": "repository",
    "log": "history", "show": "history", "blame": "history",
    "diff": "changes",
    "bisect": "searching",
    "branch": "threads", "checkout": "threads", "switch": "threads", "reset": "threads", "reflog": "threads",
    "commit": "workdir",
    "tag": "tags",
    "verify": "signing", "signers": "signing",
    "runs": "runs", "timeline": "runs",
    "watch": "following",
    "remote": "remotes", "push": "remotes", "fetch": "remotes", "clone": "remotes",
    "serve": "serving",
    "gc": "maintenance", "fsck": "maintenance", "cat-blob": "maintenance",
    "completion": "completion",
}

#: Every command module; importing one adds its commands to :data:`cli`.
MODULES = ("changes", "completion", "following", "history", "maintenance", "remotes", "repository", "runs",
           "searching", "serving", "signing", "tags", "threads", "workdir")


class Group(click.Group):
    """Commands listed in :data:`ORDER`, then any others in the order they are defined."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        rank = {name: i for i, name in enumerate(ORDER)}
        return sorted(self.commands, key=lambda name: rank.get(name, len(ORDER)))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise Interrupted() from None
        except BrokenPipeError as exc:
            raise ReaderLeft() from exc


class LazyGroup(Group):
    """The root group: imports a command's module (:data:`COMMANDS`) when the command is first
    asked for, so ``qvc log`` never loads what ``qvc push`` needs. Listing the commands (``--help``,
    completion) loads them all."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name, command, rest = super().resolve_command(ctx, args)
        started()
        if END_OF_OPTIONS in rest and not getattr(command, "own_end_of_options", False):
            i = rest.index(END_OF_OPTIONS)  # git's --end-of-options: click's `--`, unless one came first
            if "--" not in rest[:i]:
                rest = [*rest[:i], "--", *rest[i + 1:]]
        return name, command, rest

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands:
            load(*([COMMANDS[name]] if name in COMMANDS else MODULES))
        return super().get_command(ctx, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        load(*MODULES)
        return super().list_commands(ctx)


def load(*modules: str) -> None:
    """Import command modules of :mod:`qvc.cli` by name (each adds its commands to :data:`cli`)."""
    for name in modules:
        importlib.import_module(f"qvc.cli.{name}")


@click.group(cls=LazyGroup, context_settings=CONTEXT)
@click.option("-C", "chdir", metavar="DIR", type=click.Path(file_okay=False),
              help="Run as if qvc was started in DIR.")
@click.option("--repo", metavar="PATH",
              help="The repository (default: $QVC_DIR, else .qvc here or in a parent).")
@click.option("--color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colors (auto: on a terminal, unless NO_COLOR is set).")
@click.option("--no-pager", is_flag=True, help="Never page long output.")
@click.version_option(__version__, "--version", prog_name="qvc")
@click.pass_context
def cli(ctx: click.Context, chdir: str | None, repo: str | None, color: str, no_pager: bool) -> None:
    """qvc: git-like checkpoint history of AI agent runs.

    Each thread is a branch, each checkpoint a commit. Name checkpoints by id, unique id
    prefix, commit SHA or prefix, THREAD (its head), HEAD, and suffixes ~N, ^, @{N}.

    \b
    Example:
      qvc log -n 5 run-7
      qvc diff run-7~1 run-7
    """
    if chdir is not None:
        try:
            os.chdir(chdir)
        except OSError as exc:
            raise click.UsageError(f"cannot change to {chdir}: {exc.strerror}") from None
    s = Session(repo, color, not no_pager)
    ctx.obj = s
    ctx.call_on_close(s.close)


# -- entry points ------------------------------------------------------------------------------


def exit_code(exc: BaseException) -> int:
    """The exit status for a library error (see the table in docs/cli.md)."""
    return next(code for kind, code in EXIT_CODES if isinstance(exc, kind))


#: a group called with nothing to do (click 8.2 on; click 8.1 prints the help itself)
NO_ARGS_IS_HELP: type[Exception] | tuple = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return its exit status. Errors are one line on stderr, never a traceback."""
    def fail(message: str, code: int) -> int:
        click.echo(f"qvc: {message}".splitlines()[0], err=True)
        return code

    try:
        result = cli.main(args=argv, prog_name="qvc", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except NO_ARGS_IS_HELP as exc:  # `qvc`, `qvc bisect` alone: the help, as git shows its usage
        click.echo(exc.ctx.get_help(), err=True)
        return EXIT_USAGE
    except click.UsageError as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        return fail(exc.format_message() + hint, EXIT_USAGE)
    except click.ClickException as exc:
        return fail(exc.format_message(), exc.exit_code)
    except click.Abort as exc:  # click turns Ctrl-C into Abort: 130 then, as git (128 + SIGINT)
        return fail("interrupted", EXIT_INTERRUPTED) if isinstance(exc.__cause__, KeyboardInterrupt) \
            else fail("aborted", EXIT_ERROR)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except QvcError as exc:
        return fail(str(exc), exit_code(exc))
    except (BrokenPipeError, ReaderLeft) as exc:  # `qvc log | head`: the reader left; not an error
        if not stdout_gone():  # a pipe to another program (git's) broke: that is an error
            cause = exc.__cause__ if isinstance(exc, ReaderLeft) else exc
            return fail(f"{cause.filename + ': ' if cause.filename else ''}{cause.strerror or cause}", EXIT_ERROR)
        silence_stdout()
        return 0
    except (KeyboardInterrupt, Interrupted):
        return fail("interrupted", EXIT_INTERRUPTED)
    except OSError as exc:
        return fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", EXIT_ERROR)


def stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader left (its write end polls as an error), so a
    broken pipe was the reader of the command's output going away, not another program."""
    import select  # deferred: only a broken pipe gets here

    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or no stdout: as before, quiet
        return True


def silence_stdout() -> None:
    """Point stdout at /dev/null: the reader of a pipe left, so nothing more (nor the final flush) fails."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


_starting = False  # run() began and the command is not resolved yet: cyclic collection is off


def started() -> None:
    """The command is resolved (its module loaded): freeze what start-up loaded, so that no
    collection walks it again, and collect cyclic garbage as usual from here on."""
    global _starting
    if _starting:
        _starting = False
        gc.freeze()
        gc.enable()


def run() -> None:
    """The console script.

    A command is a short process whose start-up (importing click, qvc's modules) makes most of
    its objects, none of them garbage: collection is off until the command is resolved
    (:func:`started`), and what is alive is frozen again before exit, so that the interpreter's
    last collection does not walk it: about 12 ms of the 85 ms of CPU a reading command took.
    A command that wrote nothing leaves at once, without tearing its modules down.
    """
    global _starting
    _starting = True
    gc.disable()
    code = main()
    started()  # (a usage error ends before any command is resolved)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    if "pygit2" not in sys.modules and threading.active_count() == 1:
        # Nothing was opened for writing (a writable store loads libgit2; a reading one never
        # does) and nothing else runs: the interpreter's teardown of every module (about 3 ms
        # of a reading command's 67) has nothing to finish. Output is flushed; the store closed.
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        os._exit(code)
    gc.freeze()
    sys.exit(code)
