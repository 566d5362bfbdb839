"""A repository trapped in every way git offers to run a program: the hostile-input suites' bait.

:func:`arm` puts every githooks(5) hook in ``hooks/`` and in a ``core.hooksPath`` directory, sets
every program-naming configuration key (directly, through ``include.path`` and through an
``includeIf``), and routes every file through filters, a diff driver and a merge driver. Each
program is a script that leaves a marker file named for it, so a test lists what ran.
"""

from __future__ import annotations

import stat
from pathlib import Path

from helpers import run_git

from qvc.plumbing.launcher import HOOKS

#: Every key git documents as naming a program (git-config(1), gitattributes(5)).
PROGRAM_KEYS = [
    "core.fsmonitor", "core.pager", "core.editor", "core.sshCommand", "core.askPass", "core.gitProxy",
    "core.alternateRefsCommand", "sequence.editor", "pager.push", "pager.fetch", "pager.log",
    "interactive.diffFilter", "credential.helper", "credential.http://127.0.0.1.helper",
    "remote.o.uploadpack", "remote.o.receivepack", "uploadpack.packObjectsHook", "diff.external",
    "diff.evil.command", "diff.evil.textconv", "filter.evil.clean", "filter.evil.smudge", "filter.evil.process",
    "merge.evil.driver", "submodule.evil.update", "tar.evil.command", "gpg.program", "gpg.ssh.program",
    "gpg.ssh.defaultKeyCommand", "difftool.evil.cmd", "mergetool.evil.cmd", "browser.evil.cmd", "man.evil.cmd",
    "web.browser", "imap.tunnel", "sendemail.sendmailCmd", "hook.evil.command",
]


def marker_of_key(key: str) -> str:
    """The marker file the script behind configuration key ``key`` leaves."""
    return "key-" + key.replace("/", "_").replace(":", "_")


def arm(repo: Path, markers: Path) -> list[Path]:
    """Trap ``repo`` (see the module docstring); return the scripts, which write into ``markers``."""
    markers.mkdir(exist_ok=True)
    evil = repo.parent / "evil"
    evil.mkdir(exist_ok=True)
    made: list[Path] = []

    def script(name: str) -> str:
        path = evil / name
        path.write_text(f"#!/bin/sh\ntouch '{markers}/{name}'\ncat >/dev/null 2>&1\nexit 0\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        made.append(path)
        return str(path)

    (repo / "hooks").mkdir(exist_ok=True)
    hooks_path = evil / "hooks"
    hooks_path.mkdir(exist_ok=True)
    for hook in HOOKS:
        for where, prefix in ((repo / "hooks", "hook-"), (hooks_path, "hookspath-")):
            (where / hook).write_text(Path(script(prefix + hook)).read_text())
            (where / hook).chmod(0o755)
    run_git(repo, "config", "core.hooksPath", str(hooks_path))
    for key in PROGRAM_KEYS:
        run_git(repo, "config", key, script(marker_of_key(key)))
    for key, value in (("filter.evil.required", "true"), ("gc.auto", "1"), ("gc.autoDetach", "false")):
        run_git(repo, "config", key, value)
    included = repo.parent / "included.config"
    included.write_text(f"[core]\n\tpager = {script('included-pager')}\n\tfsmonitor = {script('included-fsmonitor')}\n")
    conditional = repo.parent / "conditional.config"
    conditional.write_text(f"[core]\n\taskPass = {script('conditional-askpass')}\n"
                           f"[remote \"o\"]\n\treceivepack = {script('conditional-receivepack')}\n")
    run_git(repo, "config", "include.path", str(included))
    run_git(repo, "config", f"includeIf.gitdir:{repo}/.path", str(conditional))
    (repo / "info").mkdir(exist_ok=True)
    (repo / "info" / "attributes").write_text("* filter=evil diff=evil merge=evil\n")
    return made


def use_hooks_dir(repo: Path) -> None:
    """Let git find the hooks in the repository's own ``hooks/`` directory (no ``core.hooksPath``)."""
    run_git(repo, "config", "--unset", "core.hooksPath")
