"""qvc quick start: checkpoint a scripted agent run, fork it, time-travel it, read it with git.

Runs offline with no API key. The "model" is a deterministic policy and the tools answer from
a built-in table, so every run makes the same history (only commit SHAs and ids differ).

1. A run on thread ``france`` answers "How many people live per km² in France?" in four
   checkpoints: the input, a batch of two searches, a calculator call and the final answer.
   One checkpoint is stored after every tool batch.
2. A fork: thread ``france/metropolitan`` branches from the checkpoint after the searches,
   gets an extra user message and continues on its own.
3. Time travel: the first run used a calculator that truncated to an integer. After fixing
   it, thread ``france`` is rewound to the checkpoint after the searches and replayed. The
   line it replaces stays in the repository as a superseded line.
4. The history is printed through the qvc API, then read with plain ``git``
5. and with the ``qvc`` command line (log, diff, branch, reflog, fsck).
6. The history is pushed to a plain bare git repository (any git server would do), read there
   with ``git``, and cloned back into a second qvc repository.

Usage::

    python samples/quickstart.py [--repo PATH]      # default: ./quickstart.qvc

Step 6 writes ``PATH-remote.git`` and ``PATH-clone.qvc`` beside it. Each is created, or replaced
when this sample created it before (it holds a ``qvc-sample`` file); any other file or
repository at one of these paths is refused (exit status 2) and left alone.
"""

from __future__ import annotations

import argparse
import ast
import operator
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
from sample_repo import fresh_path, fresh_remote, fresh_repository, mark  # noqa: E402 - the samples' directory is on sys.path

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore, fork_checkpoint
from qvc.store.refnames import head_ref

# --------------------------------------------------------------------------------------
# Fake tools
# --------------------------------------------------------------------------------------

# Toy data: what our pretend search engine knows.
FACTS = {
    "population of France": "France had 68,373,433 inhabitants on 1 January 2024 (INSEE).",
    "area of France": "France covers 643,801 km², overseas regions included.",
    "population of metropolitan France": "Metropolitan France had 66,142,961 inhabitants on 1 January 2024.",
    "area of metropolitan France": "Metropolitan France covers 551,695 km².",
}


def search(query: str) -> str:
    return FACTS.get(query, f"no results for {query!r}")


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}


def _evaluate(expression: str) -> float:
    """Arithmetic on numbers with + - * / only (no eval)."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression: {expression!r}")

    return walk(ast.parse(expression, mode="eval").body)


def calculator_v1(expression: str) -> str:
    return str(int(_evaluate(expression)))  # the bug: truncates to an integer


def calculator(expression: str) -> str:
    return f"{_evaluate(expression):.1f}"


# --------------------------------------------------------------------------------------
# Fake model: decides the next tool batch (or the final answer) from the state alone
# --------------------------------------------------------------------------------------


@dataclass
class Decision:
    thought: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    final: str | None = None


def number_in(text: str) -> int:
    return int(re.search(r"\d[\d,]*", text).group(0).replace(",", ""))


def scripted_model(state: dict[str, Any]) -> Decision:
    asked = " ".join(m["content"] for m in state["messages"] if m["role"] == "user")
    region = "metropolitan France" if "metropolitan" in asked else "France"
    found = {r["args"]["query"]: r["result"] for r in state["tool_results"] if r["tool"] == "search"}
    missing = [q for q in (f"population of {region}", f"area of {region}") if q not in found]
    if missing:
        return Decision(f"I need the population and area of {region}.",
                        [{"tool": "search", "args": {"query": q}} for q in missing])
    expression = f"{number_in(found[f'population of {region}'])} / {number_in(found[f'area of {region}'])}"
    done = [r for r in state["tool_results"] if r["tool"] == "calculator" and r["args"]["expression"] == expression]
    if not done:
        return Decision("Divide population by area.", [{"tool": "calculator", "args": {"expression": expression}}])
    return Decision("Done.", final=f"{region}: about {done[-1]['result']} inhabitants per km².")


# --------------------------------------------------------------------------------------
# The agent loop: one checkpoint per tool batch
# --------------------------------------------------------------------------------------

RUN_ID = uuid.uuid4().hex


def save(store: GitCheckpointStore, thread: str, state: dict[str, Any], parent: str | None,
         source: str) -> CheckpointConfig:
    """Store ``state`` as a new checkpoint on ``thread`` after checkpoint ``parent``."""
    checkpoint = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=state["current_step"],
                            state_data=state, parent_id=parent)
    metadata = {"source": source, "step": state["current_step"], "run_id": RUN_ID}
    # new_versions may be {}: qvc derives state_versions from what changed in the stored trees.
    return store.put(CheckpointConfig(thread), checkpoint, metadata, {})


def start(store: GitCheckpointStore, thread: str, question: str) -> CheckpointConfig:
    state = {"messages": [{"role": "user", "content": question}], "scratchpad": "", "current_step": 0,
             "tool_results": [], "final_result": None}
    return save(store, thread, state, None, "input")


def add_user_message(store: GitCheckpointStore, config: CheckpointConfig, text: str) -> CheckpointConfig:
    state = store.get(config).state_data
    state["messages"].append({"role": "user", "content": text})
    state["current_step"] += 1
    return save(store, config.thread_id, state, config.checkpoint_id, "update")


def run(store: GitCheckpointStore, config: CheckpointConfig, tools: dict[str, Callable[..., str]],
        max_steps: int = 10) -> CheckpointConfig:
    """Resume the thread from ``config`` until the model answers; checkpoint after each batch."""
    for _ in range(max_steps):
        state = store.get(config).state_data
        if state["final_result"] is not None:
            break
        decision = scripted_model(state)
        state["current_step"] += 1
        state["scratchpad"] += f"[{state['current_step']}] {decision.thought}\n"
        if decision.final is not None:
            state["final_result"] = decision.final
            state["messages"].append({"role": "assistant", "content": decision.final})
        else:
            state["messages"].append({"role": "assistant", "tool_calls": decision.tool_calls, "content": ""})
            for call in decision.tool_calls:
                result = tools[call["tool"]](**call["args"])
                state["tool_results"].append({**call, "result": result})
                state["messages"].append({"role": "tool", "content": result})
        config = save(store, config.thread_id, state, config.checkpoint_id, "loop")
    return config


def checkpoint_at(store: GitCheckpointStore, thread: str, step: int) -> CheckpointConfig:
    """The config of the checkpoint of ``thread``'s current line at ``step``."""
    for item in store.list(CheckpointConfig(thread)):
        if item.checkpoint.step == step:
            return item.config
    raise LookupError(f"no checkpoint at step {step} on {thread!r}")


# --------------------------------------------------------------------------------------
# Printing history
# --------------------------------------------------------------------------------------


def describe(store: GitCheckpointStore, item: Any, thread: str) -> str:
    sha = store.resolve(item.config.checkpoint_id)[:7]
    owner = item.checkpoint.thread_id
    where = "" if owner == thread else f"  (on {owner!r})"
    changed = ", ".join(store.new_versions(item.config)) or "nothing (a copy of its parent)"
    versions = " ".join(f"{k}={v}" for k, v in item.checkpoint.state_versions.items())
    return (f"  {sha}  step {item.checkpoint.step}  {item.metadata.get('source', ''):<6}  changed: {changed}{where}\n"
            f"  {'':7}  state_versions: {versions}")


def print_history(store: GitCheckpointStore) -> None:
    for thread in store.threads():
        line = list(store.list(CheckpointConfig(thread)))
        print(f"\nthread {thread!r} ({head_ref(thread)}): {len(line)} checkpoints, newest first")
        for item in line:
            print(describe(store, item, thread))
        shown = {item.config.checkpoint_id for item in line}
        left = [item for item in store.list(CheckpointConfig(thread), superseded=True)
                if item.config.checkpoint_id not in shown]
        if left:
            print("  superseded by time travel (kept under refs/qvc/superseded/), newest first:")
            for item in left:
                print(describe(store, item, thread))
        final = store.get(CheckpointConfig(thread)).state_data["final_result"]
        print(f"  final_result: {final}")


def git(repo: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", repo, *args], capture_output=True, text=True)


# --------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repo", default="quickstart.qvc",
                        help="repository to create (replaced only if a sample created it; default: %(default)s)")
    repo = fresh_path(parser.parse_args().repo)
    # every path it will write, checked before anything is written: a refusal leaves all as it was
    remote, clone = fresh_path(repo + "-remote.git"), fresh_path(repo + "-clone.qvc")
    repo = fresh_repository(repo)

    with GitCheckpointStore(repo) as store:
        # 1. A run, with the buggy calculator.
        first = run(store, start(store, "france", "How many people live per km² in France?"),
                    {"search": search, "calculator": calculator_v1})
        print(f"run on 'france': {store.get(first).state_data['final_result']}")

        # 2. Fork from the checkpoint after the searches (step 1) into a new thread.
        after_search = checkpoint_at(store, "france", 1)
        fork = fork_checkpoint(store, after_search, new_thread_id="france/metropolitan")
        fork = add_user_message(store, fork, "Only count metropolitan France.")
        fork = run(store, fork, {"search": search, "calculator": calculator})
        print(f"fork 'france/metropolitan': {store.get(fork).state_data['final_result']}")

        # 3. Time travel: rewind 'france' to step 1 and replay with the fixed calculator.
        #    fork_checkpoint without new_thread_id copies the old checkpoint onto the same thread
        #    (store.reset(thread, checkpoint_id) would move the head without a copy).
        rewound = fork_checkpoint(store, after_search)
        replayed = run(store, rewound, {"search": search, "calculator": calculator})
        print(f"replay on 'france': {store.get(replayed).state_data['final_result']}")

        print_history(store)

    # 4. Plain git reads the repository (the store is closed; nothing qvc-specific is needed).
    print(f"\n$ git --git-dir {repo} log --oneline --all --graph")
    print(git(repo, "log", "--oneline", "--all", "--graph").stdout, end="")
    print(f"\n$ git --git-dir {repo} for-each-ref --format='%(objectname:short) %(refname)'")
    print(git(repo, "for-each-ref", "--format=%(objectname:short) %(refname)").stdout, end="")

    raw = subprocess.run(["git", "--git-dir", repo, "cat-file", "blob", "refs/heads/france:final_result"],
                         capture_output=True, check=True).stdout
    print(f"\n$ git --git-dir {repo} cat-file blob refs/heads/france:final_result  # msgpack")
    print(f"decoded with msgpack: {msgpack.unpackb(raw)!r}")

    print(f"\n$ git --git-dir {repo} fsck")
    fsck = git(repo, "fsck")
    print((fsck.stdout + fsck.stderr).strip() or "(no problems)")
    if fsck.returncode != 0:
        print("git fsck failed", file=sys.stderr)
        return 1

    # 5. The qvc command line reads it too (git's verbs, checkpoint-aware output).
    qvc = [shutil.which("qvc") or sys.executable, *([] if shutil.which("qvc") else ["-m", "qvc"])]
    # 6. Push it to a plain bare repository (any git server), read it there, clone it back.
    remote = fresh_remote(remote)  # `qvc clone` creates the clone below
    for where, args in ((repo, ["checkout", "france"]), (repo, ["log", "--oneline"]),
                        (repo, ["log", "--oneline", "--all"]), (repo, ["diff", "france~1", "france"]),
                        (repo, ["branch", "-v"]), (repo, ["reflog", "-n", "3"]), (repo, ["fsck"]),
                        (repo, ["remote", "add", "origin", remote]), (repo, ["push", "origin"]),
                        (None, ["clone", remote, clone]), (clone, ["log", "--oneline", "--all"])):
        print(f"\n$ qvc {' '.join(args)}")
        done = subprocess.run([*qvc, *(["--repo", where] if where else []), "--no-pager", *args],
                              capture_output=True, text=True)
        print((done.stdout + done.stderr).rstrip())
        if done.returncode != 0:
            print(f"qvc {args[0]} failed", file=sys.stderr)
            return 1
        if args[0] == "clone":
            mark(clone)
        if args[0] == "push":
            print(f"\n$ git --git-dir {remote} log --oneline france")
            print(git(remote, "log", "--oneline", "france").stdout, end="")
    print(f"\nrepository: {repo}\nremote: {remote}\nclone: {clone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
