"""What a command loads: ``import qvc`` and the everyday reading commands pay only for what they
use (docs/benchmarks.md, "Command line"). Each check runs a fresh Python, as a person runs
``qvc``; none times anything (benchmarks/bench_cli.py measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import child_env, put

from qvc import GitCheckpointStore


def loaded_after(code: str) -> list[str]:
    """The modules of qvc (and of pygit2, filelock and subprocess) a fresh interpreter holds after running ``code``."""
    script = (f"import sys\n{code}\nimport json\n"
              "print(json.dumps(sorted(m for m in sys.modules\n"
              "                        if m.split('.')[0] in ('qvc', 'pygit2', 'filelock', 'subprocess'))))")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_import_qvc_loads_neither_the_store_nor_the_plumbing():
    loaded = loaded_after("import qvc; qvc.__version__")
    assert not [m for m in loaded if m.startswith(("qvc.store", "qvc.plumbing", "qvc.runs", "pygit2"))], loaded


def test_every_public_name_of_qvc_resolves_on_first_use():
    proc = subprocess.run(
        [sys.executable, "-c", "import qvc\nfrom qvc import GitCheckpointStore, QvcError, Run, fork_checkpoint\n"
         "missing = [n for n in qvc.__all__ if getattr(qvc, n, None) is None]\n"
         "assert not missing, missing\nassert set(qvc.__all__) <= set(dir(qvc))\n"
         "assert GitCheckpointStore.__module__ == 'qvc.store.git_store' and Run.__module__ == 'qvc.runs.model'\n"
         "try:\n    qvc.no_such_name\nexcept AttributeError as exc:\n    print(exc)\n"],
        env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "module 'qvc' has no attribute 'no_such_name'"


def test_a_store_imported_directly_still_runs_replication():
    """The store's services (replication) are plugged in when the store module loads, whoever
    imports it first: ``import qvc`` no longer loads it."""
    proc = subprocess.run(
        [sys.executable, "-c", "from qvc.store.git_store import SERVICES\n"
         "print([f'{s.__module__}.{s.__name__}' for s in SERVICES])"],
        env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['qvc._replication']"


def test_a_reading_command_loads_its_own_command_module_only(tmp_path):
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(3):
            put(store, "t", f"c{i}")
    for argv, module in ((["log", "-n", "20", "t"], "qvc.cli.history"), (["show", "t"], "qvc.cli.history"),
                         (["status"], "qvc.cli.repository")):
        loaded = loaded_after(f"from qvc.cli import main\nassert main(['--repo', {str(repo)!r}, *{argv!r}]) == 0")
        commands = [m for m in loaded if m.startswith("qvc.cli.") and m not in ("qvc.cli.app", "qvc.cli.output")]
        assert module in commands, (argv, commands)
        assert not [m for m in commands if m not in (module, "qvc.cli.runs")], (argv, commands)
        assert "pygit2" not in loaded, argv  # reading commands open the repository read-only, without libgit2
        assert "qvc.plumbing.recovery" not in loaded, argv  # a clean repository needs no repair
        assert "subprocess" not in loaded, argv  # nor runs a program (git, a push for replication's status)
        assert "filelock" not in loaded, argv  # only a replicator (a writable store's service) locks with it
        # nor the write side: the transaction and its record, and the editors' types (`checkout --to`, `commit`)
        assert not {"qvc.plumbing.transaction", "qvc.store.editing"} & set(loaded), argv


def test_the_command_table_names_each_commands_module():
    """:data:`qvc.cli.app.COMMANDS` says where each command lives (a command missing from it
    still runs, every module loaded to find it: this keeps it complete)."""
    from qvc.cli.app import COMMANDS, MODULES, cli, load

    load(*MODULES)
    where = {name: command.callback.__module__ for name, command in cli.commands.items()}
    assert where == {name: f"qvc.cli.{module}" for name, module in COMMANDS.items()}


def test_the_console_script_collects_garbage_again_once_the_command_runs(tmp_path):
    """:func:`qvc.cli.app.run` turns cyclic collection off while the command starts up (its
    module loads), and on again (start-up's objects frozen) once the command is resolved: a
    long command (``serve``, ``watch``) collects as any program does."""
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        put(store, "t", "c0")
    script = ("import gc, sys, click\nfrom qvc.cli import app\n"
              "seen = []\ninvoke, load = click.Command.invoke, app.load\n"
              "app.load = lambda *names: (seen.append(('load', gc.isenabled())), load(*names))[1]\n"
              "click.Command.invoke = lambda self, ctx: (seen.append((ctx.info_name, gc.isenabled())),\n"
              "                                          invoke(self, ctx))[1]\n"
              "main = app.main\n"
              "def watched():\n    code = main()\n"
              "    print(code, seen, gc.get_freeze_count() > 0, file=sys.stderr)\n    return code\n"
              "app.main = watched\n"
              "sys.argv = ['qvc', '--repo', sys.argv[1], 'log', '-n', '1', 't']\n"
              "app.run()\n")
    proc = subprocess.run([sys.executable, "-c", script, str(repo)], env=child_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "0 [('load', False), ('qvc', True), ('log', True)] True", proc.stderr
    assert proc.returncode == 0 and "checkpoint c0" in proc.stdout


def test_the_console_script_loads_click_with_collection_off():
    """``qvc.cli.run`` (the console script) turns cyclic collection off before click and the
    command line load: ``import qvc.cli`` loads neither."""
    script = ("import gc, sys\n"
              "sys.addaudithook(lambda event, args: print('click loads with collection',\n"
              "                 'on' if gc.isenabled() else 'off', file=sys.stderr)\n"
              "                 if event == 'import' and args[0] == 'click' else None)\n"
              "import qvc.cli\nassert 'click' not in sys.modules and 'qvc.cli.app' not in sys.modules\n"
              "sys.argv = ['qvc', '--version']\nqvc.cli.run()\n")
    proc = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("qvc, version"), proc.stderr
    assert proc.stderr == "click loads with collection off\n", proc.stderr


def test_a_command_that_wrote_nothing_leaves_without_the_interpreters_teardown(tmp_path):
    """:func:`qvc.cli.app.run` ends a command that opened nothing for writing at once (its output
    flushed whole, its exit status kept); one that wrote runs the interpreter's exit as usual
    (its ``atexit`` work: EXIT mode's flush is one)."""
    repo = tmp_path / "r.qvc"
    with GitCheckpointStore(repo) as store:
        for i in range(300):
            put(store, "t", f"c{i}")
    script = ("import atexit, sys\nfrom qvc.cli import app\n"
              "atexit.register(lambda: print('interpreter exit', file=sys.stderr))\n"
              "sys.argv = ['qvc', '--repo', *sys.argv[1:]]\napp.run()\n")

    def console(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", script, str(repo), *argv], env=child_env(), capture_output=True,
                              text=True, timeout=120)

    read = console("log", "--oneline", "t")
    assert read.returncode == 0 and read.stderr == "", read.stderr
    assert len(read.stdout.splitlines()) == 300  # all of it, written before the quick exit
    missing = console("show", "no-such-checkpoint")
    assert missing.returncode == 3 and missing.stderr.startswith("qvc: unknown revision"), missing.stderr
    wrote = console("branch", "fork", "t~3")
    assert wrote.returncode == 0 and wrote.stderr.strip().splitlines()[-1] == "interpreter exit", wrote.stderr
