"""What tests share besides fixtures: environments, the real ``git``, ``put``, the CLI, a state.

Test modules import these (``from helpers import put, run_git``); fixtures stay in
``conftest.py``. The quick tier (``python -m pytest -q -m "not slow"``) is chosen by
``conftest.pytest_configure`` through :func:`use_quick_profile`; :func:`examples` scales a test's
own Hypothesis ``max_examples`` by it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from click.testing import CliRunner, Result  # noqa: E402
from hypothesis import settings  # noqa: E402

from qvc import Checkpoint, CheckpointConfig  # noqa: E402
from qvc.cli import cli  # noqa: E402
from qvc.plumbing.repository import publish_open  # noqa: E402

# -- environments and the real git -----------------------------------------------------------------


def _git_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               LC_ALL="C.UTF-8")
    return env


def child_env() -> dict:
    """The environment for a Python subprocess that imports qvc from this checkout.

    Output is unbuffered, so each argument of ``print`` is its own write: a child that may be
    killed prints a line's fields as one string, so a kill cannot leave half a line.
    """
    env = dict(os.environ)
    # Children cache their compiled modules as users' Pythons do: hundreds of qvc processes
    # would otherwise each compile the package again (a third of a CLI call's time).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def git_env(path) -> dict:
    """The environment for running the real ``git`` on the repository at ``path`` (no user config)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=os.fspath(path), GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env


def fsck(path) -> None:
    """Assert that ``git fsck --strict`` accepts the repository at ``path`` (once this process's
    open stores there have published their writes, as a program does before it runs git)."""
    publish_open(path)
    proc = subprocess.run([shutil.which("git") or "git", "fsck", "--strict", "--no-progress"],
                          env=git_env(path), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, f"git fsck --strict failed:\n{proc.stdout}\n{proc.stderr}"


def run_git(git_dir, *args: str, check: bool = True, input: bytes | None = None,
            text: bool = True) -> subprocess.CompletedProcess:
    """Run the real ``git`` binary against ``git_dir`` (a bare repository; ``None``: no --git-dir),
    once this process's open stores there have published their writes (see ``fsck``)."""
    if git_dir is not None:
        publish_open(git_dir)
    exe = shutil.which("git")
    assert exe is not None, "git must be installed for these tests"
    prefix = [] if git_dir is None else [f"--git-dir={os.fspath(git_dir)}"]
    stdin = subprocess.DEVNULL if input is None else None
    proc = subprocess.run([exe, *prefix, *args], env=_git_env(), stdin=stdin,
                          capture_output=True, input=input, text=text, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


# -- writing checkpoints -----------------------------------------------------------------------------


def make_state(thread: str, cid: str, step: int) -> dict:
    """A state that is a pure function of its checkpoint (so a test knows what to read back):
    a list that grows and shrinks with ``step`` (past 64 items: a chunked subtree), a float and
    bytes."""
    return {"thread": thread, "cid": cid, "step": step, "messages": [f"{thread}-{j}" for j in range(step * 9 % 100)],
            "score": step * 1.5, "blob": cid.encode() * 3}


def put(store, thread: str, cid: str, step: int | None = None, state: dict | None = None, *,
        parent_id: str | None = None, metadata: dict | None = None, new_versions: dict | None = None,
        **options) -> CheckpointConfig:
    """Put checkpoint ``cid`` on ``thread`` through the store's public ``put``; return its config.

    ``step`` defaults to one past the thread's head (0 on a new thread), ``state`` to
    ``{"cid": cid, "step": step}``, ``metadata`` to ``{"source": "loop", "step": step}``;
    ``options`` (``expected_head=...``) go to ``store.put`` as they are.
    """
    config = CheckpointConfig(thread)
    if step is None:
        head = store.get_tuple(config)
        step = 0 if head is None else head.checkpoint.step + 1
    if state is None:
        state = {"cid": cid, "step": step}
    if metadata is None:
        metadata = {"source": "loop", "step": step}
    checkpoint = Checkpoint(id=cid, thread_id=thread, step=step, parent_id=parent_id, state_data=state)
    return store.put(config, checkpoint, metadata, new_versions or {}, **options)


def staged_commit(tx, parent: str | None, text: str) -> str:
    """Stage, in a transaction of :class:`qvc.plumbing.staging.Staging`, a commit of the empty tree
    whose message is ``text`` on ``parent``; return its SHA (the staging tests' unit of work)."""
    tree = tx.write("tree", b"").hex()
    body = f"tree {tree}\n" + (f"parent {parent}\n" if parent else "")
    body += f"author t <t@t> 0 +0000\ncommitter t <t@t> 0 +0000\n\n{text}\n"
    return tx.write("commit", body.encode()).hex()


def langgraph_weather(repo: Path) -> Path:
    """``repo`` written by a real LangGraph graph in its own process (tests/server/page_graph.py: a
    scripted chat model, LangGraph's ToolNode, QvcSaver): thread ``weather``, one tool call and
    its answer. The caller skips when LangGraph is not installed."""
    subprocess.run([sys.executable, str(ROOT / "tests" / "server" / "page_graph.py"), str(repo), "weather", "Oslo"],
                   env=child_env(), check=True, capture_output=True, timeout=300)
    return repo


#: What importing LangGraph needs (the ``langgraph`` extra): blocked by :func:`without` as a whole.
LANGGRAPH = ("langgraph", "langchain_core", "langchain", "ormsgpack")
_MISSING = '''
import sys

class Missing:
    """Import of {names} fails, as where they are not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {names!r}:
            raise ImportError(f"No module named {{name!r}} (not installed here)")
        return None

sys.meta_path.insert(0, Missing())
'''


def without(tmp_path: Path, *names: str) -> dict:
    """The environment of a process where importing the top-level packages ``names`` fails, as on a
    machine without them: a ``sitecustomize`` first on ``PYTHONPATH`` (in ``tmp_path/without``)
    puts a meta path finder first that raises ``ImportError`` for them."""
    shim = tmp_path / "without"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_MISSING.format(names=set(names)))
    e = env(COLUMNS="200")
    e["PYTHONPATH"] = os.pathsep.join([str(shim), e.get("PYTHONPATH", "")])
    return e


# -- the command line --------------------------------------------------------------------------------

SCRIPT = shutil.which("qvc", path=str(Path(sys.executable).parent))
QVC = [SCRIPT] if SCRIPT else [sys.executable, "-m", "qvc"]


def env(**extra: str) -> dict:
    """``child_env()`` without the variables that change what ``qvc`` prints, plus ``extra``."""
    e = child_env()
    for var in ("QVC_DIR", "NO_COLOR", "QVC_PAGER", "PAGER", "LINES", "COLUMNS", "_QVC_COMPLETE"):
        e.pop(var, None)
    e.update(extra)
    return e


def qvc(*args: str, cwd: Path | str | None = None, check: int | None = 0, timeout: float = 120,
        **extra: str) -> subprocess.CompletedProcess:
    """Run the qvc command; assert its exit status (``check``; ``None``: any) and no traceback."""
    proc = subprocess.run([*QVC, *args], cwd=cwd, env=env(**extra), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    if check is not None:
        assert proc.returncode == check, f"qvc {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def qvc_json(*args: str, cwd=None, **extra: str):
    """``qvc ... --json`` as a subprocess (exit 0 asserted), its output parsed."""
    return json.loads(qvc(*args, "--json", cwd=cwd, **extra).stdout)


def invoke(*args: str, env: dict | None = None) -> Result:
    """Run the CLI in process through click's ``CliRunner``; library exceptions propagate (a
    failing test shows them)."""
    return CliRunner().invoke(cli, list(args), obj=None, env=env, catch_exceptions=False)


# -- the quick tier ------------------------------------------------------------------------------------

QUICK_MARKEXPR = "not slow"
# Budgets of the default run's crash, kill and model loops (environment variables the suites
# read), and the quick tier's value for each: the fewest that still make every assertion bite.
QUICK_BUDGETS = {
    "QVC_CRASH_CI_ITERATIONS": "6",
    "QVC_CREATE_KILLS": "6",
    "QVC_KILL_GC_CI_SECONDS": "10",
    "QVC_MODEL_CI_EXAMPLES": "3",
    "QVC_POWERLOSS_CI_STATES": "8",
}
QUICK_EXAMPLES_SHARE = 10  # the quick tier runs a tenth of each property test's examples
_quick = False


def slow_enabled(config) -> bool:
    """Whether the long variants (marked ``slow``) run: ``-m slow`` selected them, or ``QVC_SLOW``
    is set. Each long variant may also answer to a knob of its own."""
    expr = config.getoption("markexpr", "") or ""
    return bool(os.environ.get("QVC_SLOW") or ("slow" in expr and "not slow" not in expr))


def quick() -> bool:
    """Whether this run is the quick tier (see :func:`use_quick_profile`)."""
    return _quick


def use_quick_profile() -> None:
    """Make this run the quick tier: Hypothesis's ``quick`` profile (fewer examples for tests
    that name no count), :func:`examples` scaled down, and the loop budgets of
    :data:`QUICK_BUDGETS` for those the environment does not set already (``setdefault``)."""
    global _quick
    _quick = True
    settings.register_profile("quick", max_examples=100 // QUICK_EXAMPLES_SHARE)
    settings.load_profile("quick")
    for name, value in QUICK_BUDGETS.items():
        os.environ.setdefault(name, value)


def examples(n: int) -> int:
    """A property test's ``max_examples``: ``n`` in the full run, a tenth (at least 5) in the quick tier."""
    return max(5, n // QUICK_EXAMPLES_SHARE) if _quick else n
