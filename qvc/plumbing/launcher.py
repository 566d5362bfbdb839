"""The one place qvc starts ``git``, so that a repository is data and nothing it names ever runs.

The rule: **no program named by a repository's own hooks or configuration runs when qvc works
on it.** A repository travels (pushed, cloned, copied, unpacked from an archive someone sent),
and ``git`` would otherwise run what its ``hooks/`` directory, its ``core.hooksPath`` or a key
of its ``config`` names. Every ``git`` qvc starts therefore gets command-line settings (which
git ranks above every configuration file) that override, for each program-naming key the
repository's configuration sets (its includes and conditional includes as git evaluates them):

* with the user's own value of that key, from the system and global configuration, when there
  is one (so ssh commands, credential helpers and askpass programs the user chose keep working),
* else with a value that runs nothing.

Hooks never come from the repository: ``core.hooksPath`` is the user's own, or none
(``/dev/null``). ``ext::`` and ``fd::`` transports are refused outright. What a *remote's*
server runs on its side (its own hooks, on a push) is the server's business, not this rule's.

Nothing else in qvc starts a process: ``tests/fault/test_no_programs.py`` fails if a module
does, and checks the rule against a repository trapped in every way git offers (see
``docs/security.md``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from typing import Any, Callable, Sequence

from qvc.errors import CorruptionError, QvcError
from qvc.plumbing.backend import config_plainly_fine

#: git's own hooks (githooks(5)), for reference and for the tests: none of them runs, from the
#: repository's ``hooks/`` or from a ``core.hooksPath`` its configuration names.
HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
    "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
    "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
    "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
    "post-index-change",
)

# Keys (lower-cased section and key, any subsection) whose value git runs, or hands to a shell,
# or that name a helper program git runs (git-config(1), gitattributes(5), gitremote-helpers(7)).
_PROGRAM_KEY = re.compile(r"""^(?:
      core\.(?:hookspath|fsmonitor|pager|editor|sshcommand|askpass|gitproxy|alternaterefscommand)
    | sequence\.editor | pager\..+ | interactive\.difffilter
    | credential\.(?:.+\.)?helper
    | remote\..+\.vcs
    | uploadpack\.packobjectshook
    | diff\.external | diff\..+\.(?:command|textconv) | filter\..+\.(?:clean|smudge|process)
    | merge\..+\.driver | submodule\..+\.update | tar\..+\.command
    | gpg\.program | gpg\..+\.program | gpg\.ssh\.defaultkeycommand
    | (?:diff|merge)\.(?:gui)?tool | (?:difftool|mergetool|browser|man|guitool)\..+\.(?:cmd|path)
    | web\.browser | help\.browser | instaweb\.(?:httpd|browser) | man\.viewer | imap\.tunnel
    | sendemail\.(?:smtpserver|sendmailcmd|tocmd|cccmd|headercmd|validate)
    | hook\..+\.command
)$""", re.VERBOSE)

# What a program-naming key is set to when the user's own configuration has no value for it:
# each of these values runs nothing (an empty pager or helper list, ":" as an editor, ...).
_NEUTRAL = (
    (re.compile(r"^core\.hookspath$"), os.devnull),
    (re.compile(r"^core\.fsmonitor$"), "false"),
    (re.compile(r"^(?:core\.editor|sequence\.editor)$"), ":"),
    (re.compile(r"^core\.gitproxy$"), "none"),
    (re.compile(r"^core\.sshcommand$"), "ssh"),
    (re.compile(r"^submodule\..+\.update$"), "none"),
)
_MULTI = re.compile(r"^credential\.(?:.+\.)?helper$")  # lists: an empty value resets them

# git takes a remote's ``uploadpack`` / ``receivepack`` from the *first* configuration that sets
# it, so a command-line setting cannot override the repository's: the subcommands that start
# them get git's own programs as options instead, whatever ``remote.<name>.*pack`` says.
_REMOTE_PROGRAMS = {"push": ["--receive-pack=git-receive-pack"], "fetch": ["--upload-pack=git-upload-pack"],
                    "ls-remote": ["--upload-pack=git-upload-pack"]}
# ``ext::<command>`` runs a program and ``fd::`` talks to inherited descriptors: a remote URL
# must never do either, whatever anyone's protocol.allow says (command-line -c wins over it).
_ALWAYS = ["-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never"]
#: Variables that would point git at another repository than the one qvc names.
DROPPED_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE",
               "GIT_ALLOW_PROTOCOL", "GIT_COMMON_DIR", "GIT_ALTERNATE_OBJECT_DIRECTORIES")

_user_config: tuple[tuple, list[tuple[str, str]]] | None = None  # (what it was read from, entries)
_user_lock = threading.Lock()


def git_exe() -> str:
    """The ``git`` program on ``PATH``; :class:`QvcError` if there is none."""
    exe = shutil.which("git")
    if exe is None:
        raise QvcError("git is not installed; qvc needs it for remotes and maintenance (gc, purge, fsck, log --graph)")
    return exe


def environment(*, interactive: bool = False, user_config: bool = True) -> dict[str, str]:
    """The environment git runs in: the user's (credentials, ssh agent, proxies), without what
    would point git at another repository.

    Not ``interactive`` (the library's default, and always in the background): git never asks
    for a password on the terminal and ssh runs in batch mode, so a missing credential fails
    at once instead of hanging. Without ``user_config``, git reads no system or global
    configuration either (maintenance needs none of it).
    """
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    if not interactive:
        env["GIT_TERMINAL_PROMPT"] = "0"
        if "GIT_SSH" not in env:
            env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    if not user_config:
        env = {k: v for k, v in env.items() if not k.startswith("GIT_CONFIG")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return env


def _list(args: list[str], env: dict[str, str], cwd: str | None = None) -> list[tuple[str, str]]:
    """``git config --list --null`` entries as ``(lower-cased key, value)``; reading runs nothing."""
    proc = subprocess.run([git_exe(), *args, "config", "--list", "--null", "--includes"], env=env, cwd=cwd,
                          capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise QvcError(f"cannot read git configuration: {detail[-1] if detail else proc.returncode}")
    out = []
    for item in proc.stdout.split(b"\0"):
        if item:
            key, _, value = item.decode("utf-8", "surrogateescape").partition("\n")
            out.append((key.lower(), value))
    return out


def unreadable_config(config: str, detail: object) -> CorruptionError:
    """The error for a repository's ``config`` file (at ``config``) that does not parse (exit 5):
    one line naming the file, with what the parser said."""
    return CorruptionError(f"{config}: config unreadable ({detail}); fix or restore that file")


def _repo_list(repo_path: str) -> list[tuple[str, str]]:
    """:func:`_list` of the repository's own settings; a ``config`` that does not parse is a
    :class:`CorruptionError` (:func:`unreadable_config`)."""
    try:
        return _list([f"--git-dir={repo_path}"], environment(user_config=False))
    except QvcError as exc:
        found = config_problem(repo_path)
        if found is not None:
            raise unreadable_config(os.path.join(repo_path, "config"), found) from None
        raise exc from None


def config_problem(repo_path: str) -> str | None:
    """What git says is wrong with the repository's ``config`` file (``None``: it parses, or
    there is none): ``git config --file`` reads it alone, includes and all, in one short process."""
    config = os.path.join(repo_path, "config")
    if not os.path.isfile(config) or config_plainly_fine(config):
        return None
    proc = subprocess.run([git_exe(), "config", "--file", config, "--list", "--null", "--includes"],
                          env=environment(user_config=False), capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode == 0:
        return None
    detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    return detail[-1] if detail else f"git config failed with exit status {proc.returncode}"


def _user_sources() -> tuple:
    """What the user's configuration is read from: the variables that locate it, and the files'
    identities (so an edit is seen, and a cached reading is never stale)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("GIT_CONFIG") or k in ("HOME", "XDG_CONFIG_HOME")}
    home, xdg = env.get("HOME", ""), env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME", ""), ".config")
    files = [env.get("GIT_CONFIG_GLOBAL") or os.path.join(home, ".gitconfig"), os.path.join(xdg, "git", "config"),
             env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig"]
    stats = []
    for path in files:
        try:
            st = os.stat(path)
            stats.append((path, st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            stats.append((path, None))
    return tuple(sorted(env.items())), tuple(stats)


def user_settings() -> list[tuple[str, str]]:
    """The user's own configuration (system, global, and ``GIT_CONFIG_*`` of the environment), read
    outside any repository; read again only when where it comes from changed."""
    global _user_config
    sources = _user_sources()
    with _user_lock:
        if _user_config is None or _user_config[0] != sources:
            env = environment()
            env["GIT_CEILING_DIRECTORIES"] = "/"
            _user_config = (sources, _list([], env, cwd="/"))
        return _user_config[1]


def neutralizing(repo_path: str | None, *, user_config: bool = True) -> list[str]:
    """The ``-c`` options that keep the repository at ``repo_path`` from naming a program (see the
    module docstring): for every program-naming key its configuration sets, the user's value or
    one that runs nothing; ``core.hooksPath`` always. ``user_config=False``: no user values."""
    keys = [key for key, _ in _repo_list(repo_path) if _PROGRAM_KEY.match(key)] if repo_path else []
    mine = user_settings() if user_config else []
    options: list[str] = []
    for key in dict.fromkeys(["core.hookspath", *keys]):
        values = [value for name, value in mine if name == key]
        if _MULTI.match(key):
            options += ["-c", f"{key}="] + [x for v in values for x in ("-c", f"{key}={v}")]
        else:
            neutral = next((value for pattern, value in _NEUTRAL if pattern.match(key)), "")
            options += ["-c", f"{key}={values[-1] if values else neutral}"]
        if key.startswith("filter.") and not key.endswith(".required"):  # a neutralized filter is optional
            options += ["-c", f"{key.rsplit('.', 1)[0]}.required=false"]
    return options


def command(repo_path: str | None, args: Sequence[str], *, user_config: bool = True) -> list[str]:
    """The argument list that runs ``git args`` on the repository at ``repo_path`` (``None``: on
    none, e.g. ``ls-remote`` of a URL) under the rule of this module."""
    where = [f"--git-dir={repo_path}"] if repo_path else []
    args = list(args)
    i = 0
    while i < len(args) and args[i].startswith("-"):  # git's own options (``-c k=v`` takes two)
        i += 2 if args[i] == "-c" else 1
    if i < len(args):
        args[i + 1:i + 1] = _REMOTE_PROGRAMS.get(args[i], [])
    return [git_exe(), *_ALWAYS, *neutralizing(repo_path, user_config=user_config), *where, *args]


#: Called with the repository's path before ``git`` runs on one: the repository plumbing
#: registers the publishing of this process's writes there, so ``git`` sees all of them.
BEFORE_GIT: list[Callable[[str], None]] = []


def _before(repo_path: str | None) -> None:
    if repo_path:
        for hook in BEFORE_GIT:
            hook(repo_path)


def run(repo_path: str | None, args: Sequence[str], *, user_config: bool = True, interactive: bool = False,
        **options: Any) -> subprocess.CompletedProcess:
    """Run ``git args`` (see :func:`command`) to completion, with standard input closed unless
    ``options`` say otherwise; other ``options`` go to :func:`subprocess.run`."""
    if "input" not in options:
        options.setdefault("stdin", subprocess.DEVNULL)
    _before(repo_path)
    return subprocess.run(command(repo_path, args, user_config=user_config),
                          env=environment(interactive=interactive, user_config=user_config), **options)


def popen(repo_path: str | None, args: Sequence[str], *, user_config: bool = True, interactive: bool = False,
          **options: Any) -> subprocess.Popen:
    """Start ``git args`` (see :func:`command`); ``options`` go to :class:`subprocess.Popen`."""
    options.setdefault("stdin", subprocess.DEVNULL)
    _before(repo_path)
    return subprocess.Popen(command(repo_path, args, user_config=user_config),
                            env=environment(interactive=interactive, user_config=user_config), **options)


# For the everyday runner: no automatic gc of git's own inside a command, no bitmaps qvc's
# packs do not need, and reflogs kept for every ref git moves (as qvc keeps them).
_EVERYDAY = ["-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "repack.writeBitmaps=false",
             "-c", "core.logAllRefUpdates=true"]


def run_git(repo_path: str, *args: str, lock_fd: int | None = None, input: str | None = None
            ) -> subprocess.CompletedProcess:
    """Run ``git args`` on the repository at ``repo_path`` with the system and global configuration
    ignored (qvc's own commands need none of it) and output captured as text (``input``: its
    standard input); return the finished process, whatever its exit status.

    ``lock_fd`` (the exclusive maintenance lock, :meth:`qvc.plumbing.locking.LockProtocol.exclusive`)
    is inherited by git, so the lock outlives this process if it is killed while git runs.
    """
    options: dict[str, Any] = {} if input is None else {"input": input}
    return run(repo_path, [*_EVERYDAY, *args], user_config=False, capture_output=True, text=True,
               pass_fds=() if lock_fd is None else (lock_fd,), **options)


def git(repo_path: str, *args: str, lock_fd: int | None = None) -> str:
    """Run ``git`` as :func:`run_git`; its standard output, or :class:`QvcError` with git's
    message when it fails."""
    proc = run_git(repo_path, *args, lock_fd=lock_fd)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise QvcError(f"git {args[0]} failed: {detail[-1] if detail else proc.returncode}")
    return proc.stdout


def run_user_command(argv: Sequence[str], *, env: dict[str, str], **options: Any) -> int:
    """Run a program the *user* named on qvc's command line (``qvc bisect run ... -- CMD``) to
    completion, with ``env`` as its whole environment and standard input closed; ``options`` go
    to :func:`subprocess.run`. Returns its exit status (negative: the signal that killed it).

    Never call it with anything a repository names: this is not git, and no setting neutralizes
    it. Raises :class:`QvcError` when the program cannot be started."""
    if not argv:
        raise QvcError("no program to run")
    options.setdefault("stdin", subprocess.DEVNULL)
    try:
        return subprocess.run(list(argv), env=env, **options).returncode
    except OSError as exc:
        raise QvcError(f"cannot run {argv[0]!r}: {exc.strerror or exc}") from None
