#!/usr/bin/env python
"""QvcFlowPersistence against CrewAI's SQLiteFlowPersistence, and QvcCheckpointProvider against
CrewAI's JsonProvider and SqliteProvider: the same scripted CrewAI Flow of K tool steps.

Run by hand from the repository root, in a Python that has CrewAI (its own venv: see README)::

    python benchmarks/bench_crewai.py               # K = 1, 16, 64; 3 rounds (about 30 s)
    python benchmarks/bench_crewai.py --quick       # a smoke run: 1 round, no runtime checkpoints
    python benchmarks/bench_crewai.py --rounds 5 --json out.json

The flow is CrewAI's own ``Flow`` loop, offline (plain methods, no model): ``tool`` (a start method
that also listens to ``"again"``) appends one tool result, a distinct ``--payload``-byte text of
words, to the state's ``results`` list (so the state grows with every step, as an agent's
conversation does); the router ``route`` sends ``"again"`` until there are K results, then
``"done"`` to ``answer``. A run is 2K + 1 method runs (*steps*); K is at most 99 (CrewAI stops a
flow whose method ran 100 times in one execution). Two parts, each case on a fresh
store in a fresh directory under ``--dir`` (default ``benchmarks/out/``, git-ignored):

- **flow persistence**: ``@persist(store)`` on the class, so each method run saves the whole state
  (2K + 1 saves), on CrewAI's ``SQLiteFlowPersistence`` (the store it ships: WAL, a connection per
  call, SQLite's default ``synchronous``, printed) and on ``QvcFlowPersistence`` (SYNC: every save
  fsynced before it returns). Rounds interleave the two (SQLite first in even rounds).
- **runtime checkpoints**: the same flow without ``@persist``, with
  ``checkpoint=CheckpointConfig(on_events=["method_execution_finished"])`` (one checkpoint of
  CrewAI's whole serialized ``RuntimeState`` per method run, written by CrewAI's event handlers on
  its thread pool) on ``JsonProvider`` (a file per checkpoint, never fsynced), ``SqliteProvider``
  (left out, and said so, when Python's SQLite is older than 3.45: it stores ``jsonb()``) and
  ``QvcCheckpointProvider`` (SYNC); the order rotates each round. K = 1 and 16 only
  (``--checkpoint-ks``): each event in CrewAI's record keeps a copy of the flow's state, so at K = 64
  a checkpoint is ~17 MB and a run ~760 MB, and CrewAI's handlers then race the flow (pydantic
  panics, "dictionary changed size during iteration", while the record grows under the dump): a run
  that panics, or that CrewAI finished with a checkpoint missing, is run again (up to 5 times) and
  counted. Then **the providers alone**: the serialized states CrewAI handed a provider in one such
  run (recorded by a stand-in provider) written again in order into a fresh store of each kind, each
  naming the one before as its parent; the mean time per checkpoint. ``--quick`` skips this part.

Per case, after an untimed warm-up flow of one step on the same store (imports, the repository or
database created) and an untimed ``gc.collect()`` + ``os.sync()`` (no store pays for another's
dirty pages): the wall time of ``kickoff()`` (which waits for the event handlers) divided by its
2K + 1 steps (*per step*); the bytes this process passed to ``write()`` from the kickoff until the
store is closed (``/proc/self/io`` ``wchar``; ``write_bytes``, what the kernel accounted to send to
storage, is kept in the JSON); the bytes on disk once closed (apparent sizes: the database with
``-wal``/``-shm``, the checkpoint directory, the repository). Rich's console panels are switched off
(``ConsoleFormatter.print_panel``) so the terminal is not measured; CrewAI's events still fire.
Medians over rounds. The issue's targets at K = 64 (wall time per step at most CrewAI's store's,
bytes written at most 1/10 of its) are printed as PASS/MISS; the load average before and after.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from measure import apparent, proc_io  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# CrewAI checks PyPI for a newer release and sends telemetry: neither may touch the network here.
for _name, _value in (("CREWAI_DISABLE_VERSION_CHECK", "true"), ("OTEL_SDK_DISABLED", "true"),
                      ("CREWAI_TRACING_ENABLED", "false"), ("CREWAI_DISABLE_TELEMETRY", "true"),
                      ("CREWAI_TESTING", "true")):
    os.environ.setdefault(_name, _value)

KS = (1, 16, 64)
#: CrewAI's runtime checkpoint holds every event with a copy of the flow's state: at K = 64 each is
#: ~17 MB (~760 MB a run, JsonProvider), and its handlers' dumps race the flow (see RETRIES).
CHECKPOINT_KS = (1, 16)
FLOW_KINDS = ("sqlite", "qvc")
#: SqliteProvider stores ``jsonb(?)``: SQLite 3.45 or newer; with an older one it is left out (and said so).
CKPT_KINDS = ("json", "sqlite", "qvc") if sqlite3.sqlite_version_info >= (3, 45) else ("json", "qvc")
EVENTS = ["method_execution_finished"]
RETRIES = 5
WORDS = ("the a of to and in agent tool result search found page source said value report table row "
         "number data query answer model step plan check note file list item user asked about which "
         "when where because however therefore returned error retry cached latest version").split()


def texts(k: int, tag: str, size: int) -> list:
    """``k`` distinct ``size``-byte texts of words (a Zipf-like choice: text compresses as prose does)."""
    rng = random.Random(f"{k}-{tag}")
    weights = [1 / (i + 1) for i in range(len(WORDS))]
    out = []
    for n in range(k):
        words, length = [f"result {n}:"], 0
        while length < size:
            words.append(rng.choices(WORDS, weights)[0] if rng.random() > 0.05 else str(rng.randrange(10 ** 6)))
            length += len(words[-1]) + 1
        out.append(" ".join(words)[:size])
    return out


def tool_loop(k: int, results: list, persistence=None) -> type:
    """CrewAI's ``Flow`` loop of ``k`` tool steps (see the module docstring); ``@persist(persistence)``
    on the class when given."""
    from crewai.flow.flow import Flow, listen, router, start
    from crewai.flow.persistence import persist

    class ToolLoop(Flow):
        @start("again")
        def tool(self) -> int:
            done = self.state.setdefault("results", [])
            done.append(results[len(done)])
            return len(done)

        @router(tool)
        def route(self) -> str:
            return "again" if len(self.state["results"]) < k else "done"

        @listen("done")
        def answer(self) -> str:
            self.state["answer"] = f"{len(self.state['results'])} results"
            return self.state["answer"]

    return persist(persistence)(ToolLoop) if persistence is not None else ToolLoop


# -- flow persistence ------------------------------------------------------------------------------


def open_persistence(kind: str, where: str):
    from crewai.flow.persistence.sqlite import SQLiteFlowPersistence

    from qvc.integrations.crewai import QvcFlowPersistence

    if kind == "sqlite":
        return SQLiteFlowPersistence(os.path.join(where, "flows.db"))
    return QvcFlowPersistence(os.path.join(where, "flows.qvc"))


def saved(kind: str, p, flow_id: str) -> list:
    """The states the store holds for the flow, oldest first."""
    if kind == "sqlite":
        with sqlite3.connect(p.db_path) as conn:
            rows = conn.execute("SELECT state_json FROM flow_states WHERE flow_uuid = ? ORDER BY id",
                                (flow_id,)).fetchall()
        return [json.loads(r[0]) for r in rows]
    from qvc import CheckpointConfig

    return [t.checkpoint.state_data for t in reversed(list(p.store.list(CheckpointConfig(p.thread(flow_id)))))]


def flow_case(kind: str, k: int, where: str, results: list) -> dict:
    """One measured flow of ``k`` tool steps persisted by a fresh ``kind`` store in ``where``."""
    p = open_persistence(kind, where)
    tool_loop(1, results, p)().kickoff()  # warm-up: imports, the repository / database
    flow = tool_loop(k, results, p)()
    settle()
    io0 = proc_io()
    t0 = time.perf_counter()
    flow.kickoff()
    wall = time.perf_counter() - t0
    io1 = proc_io()
    fid = flow.state["id"]
    states = saved(kind, p, fid)
    assert len(states) == 2 * k + 1 and states[-1] == p.load_state(fid), (kind, k, len(states))
    assert states[-1]["results"] == results[:k]
    io2 = proc_io()
    if kind == "qvc":
        p.close()
    io3 = proc_io()
    disk = apparent(os.path.join(where, "flows.qvc")) if kind == "qvc" else \
        apparent(*(os.path.join(where, "flows.db" + s) for s in ("", "-wal", "-shm")))
    return {"part": "flow", "kind": kind, "k": k, "steps": 2 * k + 1, "wall_s": wall,
            "wall_per_step_s": wall / (2 * k + 1),
            "wchar": io1["wchar"] - io0["wchar"] + io3["wchar"] - io2["wchar"],
            "write_bytes": io1["write_bytes"] - io0["write_bytes"] + io3["write_bytes"] - io2["write_bytes"],
            "disk": disk}


# -- runtime checkpoints ---------------------------------------------------------------------------


class Incomplete(Exception):
    """A checkpointed run wrote fewer checkpoints than it ran methods."""


def open_provider(kind: str, where: str):
    """``(CheckpointConfig, provider, where its checkpoints are)``."""
    from crewai.state.checkpoint_config import CheckpointConfig
    from crewai.state.provider.json_provider import JsonProvider
    from crewai.state.provider.sqlite_provider import SqliteProvider

    from qvc.integrations.crewai import QvcCheckpointProvider

    if kind == "json":
        location = os.path.join(where, "checkpoints")
        return CheckpointConfig(location=location, provider=JsonProvider(), on_events=EVENTS), None, location
    if kind == "sqlite":
        location = os.path.join(where, "checkpoints.db")
        return CheckpointConfig(location=location, provider=SqliteProvider(), on_events=EVENTS), None, location
    provider = QvcCheckpointProvider(os.path.join(where, "checkpoints.qvc"))
    return provider.config(on_events=EVENTS), provider, provider.path


def checkpoints(kind: str, location: str, provider) -> int:
    if kind == "json":
        return sum(len(names) for _, _, names in os.walk(location))
    if kind == "sqlite":
        with sqlite3.connect(location) as conn:
            return conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    from qvc import CheckpointConfig

    return len(list(provider.store.list(CheckpointConfig(provider.thread("main")), superseded=True)))


def checkpoint_case(kind: str, k: int, where: str, results: list) -> dict:
    """One measured flow of ``k`` tool steps with runtime checkpoints on a fresh ``kind`` provider."""
    from crewai.events.event_bus import crewai_event_bus

    cfg, provider, location = open_provider(kind, where)
    tool_loop(1, results)(checkpoint=cfg).kickoff()  # warm-up
    crewai_event_bus.flush()
    before = checkpoints(kind, location, provider)
    flow = tool_loop(k, results)(checkpoint=cfg)
    settle()
    io0 = proc_io()
    t0 = time.perf_counter()
    flow.kickoff()
    crewai_event_bus.flush()  # kickoff waits for its handlers already; nothing may be left
    wall = time.perf_counter() - t0
    io1 = proc_io()
    written = checkpoints(kind, location, provider) - before
    if written < 2 * k + 1:  # a handler's dump panicked and CrewAI went on without that checkpoint
        raise Incomplete(f"{written} checkpoints of {2 * k + 1}")
    io2 = proc_io()
    if provider is not None:
        provider.close()
    io3 = proc_io()
    disk = apparent(*(location + s for s in ("", "-wal", "-shm")))
    return {"part": "checkpoint", "kind": kind, "k": k, "steps": 2 * k + 1, "checkpoints": written, "wall_s": wall,
            "wall_per_step_s": wall / (2 * k + 1),
            "wchar": io1["wchar"] - io0["wchar"] + io3["wchar"] - io2["wchar"],
            "write_bytes": io1["write_bytes"] - io0["write_bytes"] + io3["write_bytes"] - io2["write_bytes"],
            "disk": disk}


def record(k: int, results: list) -> list:
    """What CrewAI hands a provider in a checkpointed run of ``k`` tool steps: ``[(data, branch)]``."""
    from crewai.events.event_bus import crewai_event_bus
    from crewai.state.checkpoint_config import CheckpointConfig
    from crewai.state.provider.json_provider import JsonProvider

    payloads: list = []

    class Recorder(JsonProvider):
        def checkpoint(self, data: str, location: str, *, parent_id=None, branch: str = "main") -> str:
            payloads.append((data, branch))
            return os.path.join(location, f"recorded{len(payloads)}_p-{parent_id or 'none'}.json")

    for _ in range(RETRIES):
        payloads.clear()
        try:
            tool_loop(k, results)(checkpoint=CheckpointConfig(location="unused", provider=Recorder(),
                                                              on_events=EVENTS)).kickoff()
            crewai_event_bus.flush()
        except BaseException as exc:  # pyo3's PanicException is a BaseException
            if type(exc).__name__ != "PanicException":
                raise
            continue
        if len(payloads) == 2 * k + 1:
            return list(payloads)
    raise RuntimeError(f"K={k}: CrewAI did not complete a checkpointed run in {RETRIES} tries")


def replay_case(kind: str, k: int, where: str, payloads: list) -> dict:
    """The provider alone: the recorded checkpoints written in order, each naming the one before as
    its parent, as CrewAI's lineage does; each call timed."""
    cfg, provider, location = open_provider(kind, where)
    provider = provider or cfg.provider
    provider.checkpoint(payloads[0][0], location, branch="warm-up")
    settle()
    times, parent = [], None
    io0 = proc_io()
    for data, branch in payloads:
        t0 = time.perf_counter()
        parent = provider.extract_id(provider.checkpoint(data, location, parent_id=parent, branch=branch))
        times.append(time.perf_counter() - t0)
    if kind == "qvc":
        provider.close()
    io1 = proc_io()
    return {"part": "replay", "kind": kind, "k": k, "steps": len(payloads), "wall_per_step_s": sum(times) / len(times),
            "median_s": statistics.median(times), "wchar": io1["wchar"] - io0["wchar"],
            "write_bytes": io1["write_bytes"] - io0["write_bytes"],
            "disk": apparent(*(location + s for s in ("", "-wal", "-shm"))),
            "payload": sum(len(d) for d, _ in payloads)}


# -- running ---------------------------------------------------------------------------------------


def settle() -> None:
    """Untimed: garbage collected, everyone's dirty pages written back."""
    gc.collect()
    os.sync()


def quiet_console() -> None:
    """CrewAI prints a Rich panel per flow event whatever ``verbose`` says; the terminal is not measured."""
    from crewai.events.utils.console_formatter import ConsoleFormatter

    ConsoleFormatter.print_panel = lambda self, *a, **kw: None


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def header(args: argparse.Namespace) -> None:
    import crewai
    import pygit2

    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "qvc"], capture_output=True,
                           text=True).stdout
    with sqlite3.connect(":memory:") as conn:
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    print(f"qvc {rev.strip()}{' (qvc/ modified)' if dirty.strip() else ''}, crewai {crewai.__version__}, "
          f"Python {sys.version.split()[0]}, pygit2 {pygit2.__version__} / libgit2 {pygit2.LIBGIT2_VERSION}, "
          f"SQLite {sqlite3.sqlite_version} (default synchronous={sync}), {os.cpu_count()} CPUs")
    print(f"{args.rounds} round(s), K = {', '.join(map(str, args.ks))} (runtime checkpoints: "
          f"{', '.join(map(str, args.checkpoint_ks)) or 'none'}), {args.payload}-byte tool results; "
          f"load average before: {load()}")


def kb(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if abs(n) >= 1e6 else f"{n / 1e3:.1f} KB"


def ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.0f} us"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def summarize(cases: list, part: str, kinds: tuple, base: str, ks: list) -> list:
    def med(kind: str, key: str, k: int) -> float:
        return statistics.median(c[key] for c in cases if c["part"] == part and c["kind"] == kind and c["k"] == k)

    rows = []
    for k in ks:
        row = {"k": k, "steps": 2 * k + 1}
        for kind in kinds:
            for key in ("wall_per_step_s", "wchar", "write_bytes", "disk"):
                row[f"{kind}_{key}"] = med(kind, key, k)
        row["wall_ratio"] = row["qvc_wall_per_step_s"] / row[f"{base}_wall_per_step_s"]
        row["wchar_ratio"] = row["qvc_wchar"] / max(row[f"{base}_wchar"], 1)
        rows.append(row)
    return rows


def print_rows(rows: list, kinds: tuple, base: str, names: dict) -> None:
    head = f"{'K':>3} {'steps':>5} | " + " ".join(f"{'wall/step ' + names[x]:>16}" for x in kinds) + \
        f" {'qvc/' + names[base]:>10} | " + " ".join(f"{'write() ' + names[x]:>14}" for x in kinds) + \
        f" {'qvc/' + names[base]:>10} | " + " ".join(f"{'disk ' + names[x]:>11}" for x in kinds)
    print(head)
    for r in rows:
        print(f"{r['k']:>3} {r['steps']:>5} | " + " ".join(f"{ms(r[x + '_wall_per_step_s']):>16}" for x in kinds) +
              f" {r['wall_ratio']:>10.2f} | " + " ".join(f"{kb(r[x + '_wchar']):>14}" for x in kinds) +
              f" {r['wchar_ratio']:>10.3f} | " + " ".join(f"{kb(r[x + '_disk']):>11}" for x in kinds))


def targets(rows: list, name: str) -> None:
    last = rows[-1]
    print(f"K={last['k']} targets against {name}: wall time per step <= 1.0x: {verdict(last['wall_ratio'] <= 1.0)} "
          f"({last['wall_ratio']:.2f}); bytes written <= 1/10: {verdict(last['wchar_ratio'] <= 0.1)} "
          f"({last['wchar_ratio']:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, flow persistence only")
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS),
                        help="tool steps per run (default 1 16 64; at most 99: CrewAI stops a flow whose method "
                             "ran 100 times in one execution)")
    parser.add_argument("--payload", type=int, default=2000, help="bytes of each tool result (default 2000)")
    parser.add_argument("--checkpoint-ks", type=int, nargs="*", default=list(CHECKPOINT_KS),
                        help="tool steps per run of the runtime-checkpoint part (default 1 16; none: skip it)")
    parser.add_argument("--dir", help="parent of the work directory (default benchmarks/out/)")
    parser.add_argument("--keep", action="store_true", help="keep the stores")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.checkpoint_ks = 1, []
    ks, cks = sorted(args.ks), sorted(args.checkpoint_ks)
    if max(ks + cks) > 99 or min(ks + cks) < 1:
        parser.error("K is 1 to 99: CrewAI stops a flow whose method ran 100 times in one execution")
    quiet_console()
    header(args)
    base_dir = args.dir or os.path.join(ROOT, "benchmarks", "out")
    os.makedirs(base_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="bench-crewai-", dir=base_dir)
    cases, panics = [], []
    try:
        for r in range(args.rounds):
            for k in sorted(set(ks) | set(cks)):
                results = texts(k + 1, f"round {r}", args.payload)
                for kind in (FLOW_KINDS if r % 2 == 0 else FLOW_KINDS[::-1]) if k in ks else ():
                    where = os.path.join(tmp, f"flow-{kind}-{k}-{r}")
                    os.makedirs(where)
                    cases.append(flow_case(kind, k, where, results))
                    if not args.keep:
                        shutil.rmtree(where, ignore_errors=True)
                if k not in cks:
                    continue
                for kind in CKPT_KINDS[r % len(CKPT_KINDS):] + CKPT_KINDS[:r % len(CKPT_KINDS)]:
                    for attempt in range(RETRIES):
                        where = os.path.join(tmp, f"checkpoint-{kind}-{k}-{r}-{attempt}")
                        os.makedirs(where)
                        try:
                            cases.append(checkpoint_case(kind, k, where, results))
                            break
                        except BaseException as exc:  # pyo3's PanicException is a BaseException
                            if not (type(exc).__name__ == "PanicException" or isinstance(exc, Incomplete)) \
                                    or attempt == RETRIES - 1:
                                raise
                            panics.append({"kind": kind, "k": k, "round": r, "error": str(exc)})
                            print(f"  {kind} K={k}: CrewAI's runtime-state dump panicked ({exc}); run again",
                                  flush=True)
                        finally:
                            if not args.keep:
                                shutil.rmtree(where, ignore_errors=True)
                payloads = record(k, results)
                for kind in CKPT_KINDS[::-1] if r % 2 else CKPT_KINDS:
                    where = os.path.join(tmp, f"replay-{kind}-{k}-{r}")
                    os.makedirs(where)
                    cases.append(replay_case(kind, k, where, payloads))
                    if not args.keep:
                        shutil.rmtree(where, ignore_errors=True)
                del payloads
            print(f"round {r + 1} done, load {load()}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    flows = summarize(cases, "flow", FLOW_KINDS, "sqlite", ks)
    print(f"\nflow persistence: @persist on SQLiteFlowPersistence and QvcFlowPersistence (SYNC); "
          f"{args.rounds} round(s), medians")
    print_rows(flows, FLOW_KINDS, "sqlite", {"sqlite": "SQLite", "qvc": "qvc"})
    targets(flows, "SQLiteFlowPersistence")
    summary = {"flow": flows}
    if cks:
        ckpts = summarize(cases, "checkpoint", CKPT_KINDS, "json", cks)
        print("\nruntime checkpoints (on method_execution_finished): "
              + ", ".join({"json": "JsonProvider", "sqlite": "SqliteProvider"}[x] for x in CKPT_KINDS[:-1])
              + ", QvcCheckpointProvider (SYNC); ratios against JsonProvider")
        print_rows(ckpts, CKPT_KINDS, "json", {"json": "JSON", "sqlite": "SQLite", "qvc": "qvc"})
        if "sqlite" in CKPT_KINDS:
            for row in ckpts:
                row["wall_ratio_sqlite"] = row["qvc_wall_per_step_s"] / row["sqlite_wall_per_step_s"]
                row["wchar_ratio_sqlite"] = row["qvc_wchar"] / max(row["sqlite_wchar"], 1)
            print("qvc / SqliteProvider: " + ", ".join(
                f"K={r['k']}: wall {r['wall_ratio_sqlite']:.2f}, written {r['wchar_ratio_sqlite']:.3f}" for r in ckpts))
        else:
            print(f"SqliteProvider left out: it stores jsonb(), SQLite 3.45 or newer, and this Python has "
                  f"SQLite {sqlite3.sqlite_version}")
        targets(ckpts, "JsonProvider")
        summary["checkpoint"] = ckpts
        replays = summarize(cases, "replay", CKPT_KINDS, "json", cks)
        print("\nthe providers alone: the serialized states CrewAI handed a provider in one such run, recorded, "
              "then written in order (mean per checkpoint)")
        print_rows(replays, CKPT_KINDS, "json", {"json": "JSON", "sqlite": "SQLite", "qvc": "qvc"})
        for row in replays:
            row["payload"] = statistics.median(c["payload"] for c in cases
                                               if c["part"] == "replay" and c["k"] == row["k"])
        print("CrewAI's serialized states: " + ", ".join(f"K={r['k']}: {kb(r['payload'])}" for r in replays))
        summary["replay"] = replays
        print(f"runs CrewAI's own race killed (its thread pool dumping the runtime state while the flow changes it: "
              f"pydantic's PanicException, which its `except Exception` does not catch), run again: "
              f"{len(panics)}" + (" (" + ", ".join(f"{p['kind']} K={p['k']}" for p in panics) + ")" if panics else ""))
    print(f"\nload average after: {load()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cases": cases, "summary": summary, "panics": panics}, f, indent=2)


if __name__ == "__main__":
    main()
