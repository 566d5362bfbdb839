"""qvc serve: the real app, served by a real `qvc serve` process, on a real repository.

Every response is checked against the OpenAPI document the server itself serves; a second
process writes the repository while the server runs, and the event stream and the API see it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from helpers import ROOT, child_env

if os.environ.get("CI") != "true":  # CI installs the test extra: there, a missing server stack fails
    pytest.importorskip("fastapi", reason='qvc serve needs the server extra: pip install -e ".[test]"')
import jsonschema  # noqa: E402
from openapi_spec_validator import validate as validate_spec  # noqa: E402

from qvc import Checkpoint, CheckpointConfig, GitCheckpointStore  # noqa: E402
from qvc.runs import Runs  # noqa: E402
from samples.scripted_agent import QUESTION, RESEARCH_PLAN, SYSTEM, ScriptedModel, drive, make_tools  # noqa: E402

# -- a repository and a server ---------------------------------------------------------------


def build_repository(path: Path) -> dict:
    """Runs (COMPLETED, ERROR, CANCELLED) and a plain thread with pending writes, a fork and a
    superseded line. Returns names the tests use."""
    with GitCheckpointStore(path) as store:
        runs = Runs(store)
        with runs.start(QUESTION, system=SYSTEM, session_id="s1", run_id="done") as rec:
            drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools())
        with pytest.raises(ConnectionError):
            with runs.start(QUESTION, system=SYSTEM, session_id="s1", run_id="failed") as rec:
                drive(rec, ScriptedModel(RESEARCH_PLAN, fail_on=[3]), make_tools())
        with runs.start(QUESTION, system=SYSTEM, session_id="s2", run_id="stopped") as rec:
            rec.add_message({"role": "assistant", "content": "thinking"})
            rec.checkpoint()
            rec.cancel("user pressed stop")
        parent = None
        for step in range(3):
            cp = Checkpoint(id=f"note-{step}", thread_id="notes", step=step, parent_id=parent,
                            state_data={"text": "x" * (step + 1), "tags": {"a", "b"} if step else {"a"}, "n": step})
            store.put(CheckpointConfig("notes"), cp, {"source": "loop", "step": step})
            parent = cp.id
        store.put_writes(CheckpointConfig("notes", "note-1"), [("text", "draft")], task_id="task-1")
        from qvc import fork_checkpoint

        fork_checkpoint(store, CheckpointConfig("notes", "note-1"), "notes/alt")
        store.reset("notes", "note-1")
        return {"notes_tip": store.head("notes")}


class Server:
    """A `qvc serve` process; ``url`` is where it listens, ``token`` the one its URL carries (for
    actions, or every request with --token), ``page`` the URL it printed, ``auth`` the header."""

    def __init__(self, repo: Path, *args: str, env: dict | None = None):
        self.proc = subprocess.Popen([sys.executable, "-m", "qvc", "--repo", str(repo), "serve", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**child_env(), **(env or {})}, stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        m = re.search(r"at (http://\S+?/)(\?token=[^\s;]+)?[ ;]", line)
        assert m, f"no URL in {line!r}: {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.url = m.group(1)
        self.token = (m.group(2) or "")[len("?token="):] or None
        self.page = self.url + (m.group(2) or "")
        self.auth = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.line = line

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=15)
        finally:
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple:
    path = tmp_path_factory.mktemp("serve") / "runs.qvc"
    names = build_repository(path)
    # A live worker owns run "w1" for the whole module (continuing it must be refused).
    worker = subprocess.Popen([sys.executable, str(Path(ROOT, "tests", "workers", "runs_worker.py")), str(path), "w1"],
                              stdout=subprocess.PIPE, text=True, env=child_env(), stdin=subprocess.DEVNULL)
    assert worker.stdout.readline().startswith("ready")
    yield path, names
    worker.kill()
    worker.wait()
    worker.stdout.close()


@pytest.fixture(scope="module")
def server(repo):
    s = Server(repo[0])
    yield s
    assert s.stop() == 0


# -- HTTP with every answer checked against the served OpenAPI document ------------------------


def request(url: str, method: str = "GET", body=None, headers: dict | None = None) -> tuple:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={
        **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()


class API:
    """Calls ``METHOD /path/{template}`` and validates the JSON answer against the schema the
    served document declares for that operation and status."""

    def __init__(self, base: str, headers: dict | None = None, spec: dict | None = None):
        self.base, self.headers = base, headers or {}
        if spec is None:
            status, _, raw = request(base + "openapi.json", headers=self.headers)
            assert status == 200
            spec = json.loads(raw)
        self.spec = spec

    def __call__(self, method: str, template: str, body=None, query: dict | None = None, **params) -> tuple:
        path = template
        for key, value in params.items():
            path = path.replace("{" + key + "}", urllib.parse.quote(str(value), safe="/~"))
        url = self.base.rstrip("/") + path + ("?" + urllib.parse.urlencode(query, doseq=True) if query else "")
        status, headers, raw = request(url, method, body, self.headers)
        assert headers.get("content-type", "").startswith("application/json"), (status, raw[:200])
        data = json.loads(raw)
        operation = self.spec["paths"][template][method.lower()]
        declared = operation["responses"].get(str(status))
        assert declared is not None, f"{method} {template} answered {status}, which the document does not declare"
        schema = declared["content"]["application/json"]["schema"]
        jsonschema.validate(data, {**schema, "components": self.spec["components"]},
                            cls=jsonschema.Draft202012Validator)
        if status >= 400:
            assert data["error"]["status"] == status and data["error"]["message"], data
        return status, data


@pytest.fixture(scope="module")
def api(server) -> API:
    return API(server.url, headers=server.auth)


# -- the document -------------------------------------------------------------------------------


def test_openapi_document_is_valid_and_complete(api):
    validate_spec(api.spec)
    ops = {(m.upper(), p) for p, item in api.spec["paths"].items() for m in item}
    for op in [("GET", "/api/threads"), ("GET", "/api/threads/{thread}"), ("GET", "/api/checkpoints/{name}"),
               ("GET", "/api/diff"), ("GET", "/api/search"), ("GET", "/api/runs"),
               ("GET", "/api/runs/{run_id}/checkpoints"),
               ("GET", "/api/runs/{run_id}/checkpoints/{at}"), ("POST", "/api/runs/{run_id}/continue"),
               ("POST", "/api/runs/{run_id}/fork"), ("POST", "/api/fork"), ("POST", "/api/reset"),
               ("DELETE", "/api/threads/{thread}"), ("DELETE", "/api/checkpoints/{name}"), ("GET", "/api/events")]:
        assert op in ops
    cont = api.spec["paths"]["/api/runs/{run_id}/continue"]["post"]["responses"]
    assert {"200", "400", "403", "404", "409"} <= set(cont)
    # No CDN: the interactive docs (which load scripts from one) are not served.
    assert request(api.base + "docs")[0] == 404


# -- reading ------------------------------------------------------------------------------------


def test_repository_and_threads_paged_and_filtered(api):
    status, repo = api("GET", "/api/repository")
    assert status == 200 and repo["read_only"] is False and repo["live"] in ("inotify", "poll")
    _, page = api("GET", "/api/threads")
    names = [t["thread"] for t in page["threads"]]
    assert {"notes", "notes/alt", "run/s1/done", "run/s1/failed", "run/s2/stopped", "run/workers/w1"} <= set(names)
    assert names == sorted(names) and page["total"] == len(names)
    done = next(t for t in page["threads"] if t["thread"] == "run/s1/done")
    assert done["status"] == "COMPLETED" and done["checkpoints"] == 4 and done["run"] == {"session_id": "s1",
                                                                                          "run_id": "done"}
    _, second = api("GET", "/api/threads", query={"offset": 1, "limit": 2})
    assert [t["thread"] for t in second["threads"]] == names[1:3] and second["total"] == len(names)
    _, completed = api("GET", "/api/threads", query={"status": "COMPLETED"})
    assert [t["thread"] for t in completed["threads"]] == ["run/s1/done"] and completed["total"] == 1
    _, prefixed = api("GET", "/api/threads", query={"prefix": "notes"})
    assert [t["thread"] for t in prefixed["threads"]] == ["notes", "notes/alt"]
    assert api("GET", "/api/threads", query={"limit": 0})[0] == 400


def test_thread_line_with_superseded_line_and_fork(api, repo):
    status, line = api("GET", "/api/threads/{thread}", thread="notes")
    assert status == 200 and line["head"] == repo[1]["notes_tip"] and line["run"] is None
    assert [e["id"] for e in line["line"]] == ["note-1", "note-0"]
    [sup] = line["superseded"]
    assert [e["id"] for e in sup["line"]] == ["note-2"] and sup["joins"] == line["head"]
    assert all(e["superseded"] for e in sup["line"])
    [fork] = line["forks"]
    assert fork["thread"] == "notes/alt" and fork["at"] == line["head"]
    _, alt = api("GET", "/api/threads/{thread}", thread="notes/alt")
    assert [e["thread"] for e in alt["line"]] == ["notes/alt", "notes", "notes"]  # crosses into its source
    _, run_line = api("GET", "/api/threads/{thread}", thread="run/s1/done", query={"limit": 2})
    assert len(run_line["line"]) == 2 and run_line["truncated"] and run_line["run"]["run_id"] == "done"
    status, err = api("GET", "/api/threads/{thread}", thread="no/such")
    assert status == 404 and err["error"]["type"] == "UnknownThreadError"


def test_checkpoint_state_metadata_pending_writes(api):
    status, cp = api("GET", "/api/checkpoints/{name}", name="note-1")
    assert status == 200 and cp["thread"] == "notes" and cp["step"] == 1
    assert cp["state"] == {"text": "xx", "tags": {"$set": ["a", "b"]}, "n": 1}  # lossless tagged JSON
    assert cp["metadata"]["source"] == "loop" and cp["parent"] == {"thread": "notes", "id": "note-0"}
    assert cp["pending_writes"] == [{"task": "task-1", "channel": "text", "value": "draft"}]
    assert cp["signature"] is None  # unsigned, and no allowed signers: nothing to say (docs/signing.md)
    assert api("GET", "/api/checkpoints/{name}", name=cp["commit"][:10])[1]["id"] == "note-1"
    assert api("GET", "/api/checkpoints/{name}", name="notes~1")[1]["id"] == "note-0"
    _, only = api("GET", "/api/checkpoints/{name}", name="note-1", query={"field": ["n"]})
    assert only["state"] == {"n": 1}
    status, err = api("GET", "/api/checkpoints/{name}", name="note-1", query={"field": ["nope"]})
    assert status == 404 and "nope" in err["error"]["message"]
    assert api("GET", "/api/checkpoints/{name}", name="zzzz-unknown")[0] == 404


def test_langgraph_pending_writes_are_listed_and_counted(tmp_path):
    """A LangGraph checkpoint's pending writes (the saver keeps them in the store's keyed layout)
    are in its API form, decoded as the viewer shows them, and ``/api/repository`` counts the
    checkpoints that have some: what LangGraph itself sees (the API once listed none)."""
    pytest.importorskip("langgraph.prebuilt", reason="LangGraph is in the test extra")
    from helpers import langgraph_weather

    from qvc.integrations.langgraph import QvcSaver
    from qvc.integrations.langgraph.viewer import internal

    repo = langgraph_weather(tmp_path / "lg.qvc")
    with QvcSaver(repo, create=False) as saver:
        seen = {t.config["configurable"]["checkpoint_id"]: list(t.pending_writes)
                for t in saver.list({"configurable": {"thread_id": "weather"}})}
    assert sum(1 for w in seen.values() if w) >= 2
    s = Server(repo)
    try:
        api = API(s.url, headers=s.auth)
        _, info = api("GET", "/api/repository")
        assert info["pending_writes"] == sum(1 for w in seen.values() if w)
        for cid, writes in seen.items():
            _, cp = api("GET", "/api/checkpoints/{name}", name=cid)
            visible = [(t, c, v) for t, c, v in writes if not internal(c)]
            assert [(w["task"], w["channel"]) for w in cp["pending_writes"]] == [(t, c) for t, c, _ in visible]
            for w, (_, _, value) in zip(cp["pending_writes"], visible, strict=True):
                assert [m["content"] for m in w["value"]] == [m.content for m in value]
    finally:
        assert s.stop() == 0


def test_diff_against_parent_and_between_two(api):
    _, d = api("GET", "/api/diff", query={"b": "note-1"})
    assert d["b"] and d["a"] == api("GET", "/api/checkpoints/{name}", name="note-0")[1]["commit"]
    by = {f["field"]: f for f in d["fields"]}
    assert by["n"]["changes"] == [{"path": [], "op": "change", "old": 0, "new": 1}]
    assert by["tags"]["changes"] == [{"path": [], "op": "add", "new": "b", "member": True}]
    _, first = api("GET", "/api/diff", query={"b": "note-0"})
    assert first["a"] is None and {f["status"] for f in first["fields"]} == {"added"}
    _, two = api("GET", "/api/diff", query={"a": "note-2", "b": "note-0"})
    assert {f["field"] for f in two["fields"]} == {"text", "tags", "n"}
    assert two["a"] == api("GET", "/api/checkpoints/{name}", name="note-2")[1]["commit"]  # any two, not only the parent
    assert api("GET", "/api/diff")[0] == 400
    assert api("GET", "/api/diff", query={"b": "nope-nope"})[0] == 404


def test_runs_timeline_and_snapshots(api):
    _, page = api("GET", "/api/runs")
    assert {r["run_id"] for r in page["runs"]} >= {"done", "failed", "stopped", "w1"}
    _, errored = api("GET", "/api/runs", query={"status": "ERROR"})
    assert [r["run_id"] for r in errored["runs"]] == ["failed"]
    _, s2 = api("GET", "/api/runs", query={"session": "s2"})
    assert [r["run_id"] for r in s2["runs"]] == ["stopped"]
    assert api("GET", "/api/runs", query={"status": "DONE"})[0] == 400
    _, run = api("GET", "/api/runs/{run_id}", run_id="done")
    assert run["run"]["status"] == "COMPLETED" and len(run["run"]["messages"]) == 10
    assert run["owner_status"]["state"] == "none"
    assert api("GET", "/api/runs/{run_id}", run_id="w1")[1]["owner_status"]["state"] == "live"

    _, tl = api("GET", "/api/runs/{run_id}/checkpoints", run_id="done")
    assert tl["session_id"] == "s1" and tl["thread"] == "run/s1/done"
    assert [e["message_index"] for e in tl["checkpoints"]] == [5, 7, 9, 10]
    assert tl["checkpoints"][-1]["is_latest"] and tl["checkpoints"][0]["preview"]
    head = run["run"]["checkpoint_id"]

    _, snap = api("GET", "/api/runs/{run_id}/checkpoints/{at}", run_id="done", at=3)
    assert snap["message_index"] == 2 and snap["snapped"] and len(snap["run"]["messages"]) == 2  # pair-safe
    _, exact = api("GET", "/api/runs/{run_id}/checkpoints/{at}", run_id="done", at=7)
    assert exact["exact"] and exact["run"]["status"] == "RUNNING" and len(exact["run"]["messages"]) == 7
    _, by_id = api("GET", "/api/runs/{run_id}/checkpoints/{at}", run_id="done", at=tl["checkpoints"][0]["id"])
    assert by_id["message_index"] == 5
    assert api("GET", "/api/runs/{run_id}", run_id="done")[1]["run"]["checkpoint_id"] == head  # never mutates

    status, err = api("GET", "/api/runs/{run_id}/checkpoints/{at}", run_id="done", at=11)
    assert status == 400 and "outside 0..10" in err["error"]["message"]
    assert api("GET", "/api/runs/{run_id}/checkpoints/{at}", run_id="done", at="no-such-checkpoint")[0] == 404
    assert api("GET", "/api/runs/{run_id}/checkpoints", run_id="nobody")[0] == 404
    assert api("GET", "/api/runs/{run_id}", run_id="nobody")[1]["error"]["type"] == "UnknownRunError"


def test_search_by_text_status_and_date(api):
    """`/api/search`: threads whose conversations say a text (case-insensitive), by status and date."""
    _, found = api("GET", "/api/search", query={"q": "TOKYO: 14.1", "prefix": "run/s1/"})
    assert [t["thread"] for t in found["threads"]] == ["run/s1/done", "run/s1/failed"] and found["total"] == 2
    hit = found["threads"][0]
    assert hit["run"] == {"session_id": "s1", "run_id": "done"} and hit["status"] == "COMPLETED"
    assert hit["updated"] and hit["head"] and hit["head_id"]
    assert any(m["role"] == "tool" and "Tokyo: 14.1 million" in m["snippet"] for m in hit["matches"])
    _, errored = api("GET", "/api/search", query={"q": "tokyo", "status": "ERROR"})
    assert [t["thread"] for t in errored["threads"]] == ["run/s1/failed"]
    # A state without a conversation is searched in all its strings; ids are not text.
    _, notes = api("GET", "/api/search", query={"q": "xx", "prefix": "notes"})
    assert [t["thread"] for t in notes["threads"]] == ["notes", "notes/alt"]  # the fork of note-1 says it too
    assert notes["threads"][0]["matches"] == [{"path": ["text"], "role": None, "snippet": "xx"}]
    assert api("GET", "/api/search", query={"q": "xxx", "prefix": "notes"})[1]["total"] == 0  # note-2 was rewound
    assert api("GET", "/api/search", query={"q": "call_0", "prefix": "run/s1/done"})[1]["total"] == 0
    # By date: the time of the thread's last checkpoint, as `qvc log --since/--until` read dates.
    every = api("GET", "/api/search")[1]
    assert every["total"] == api("GET", "/api/threads")[1]["total"] and not every["threads"][0]["matches"]
    newest = max(t["timestamp"] for t in every["threads"])
    assert api("GET", "/api/search", query={"since": f"@{newest + 1}"})[1]["total"] == 0
    assert api("GET", "/api/search", query={"until": "2000-01-01"})[1]["total"] == 0
    assert api("GET", "/api/search", query={"since": "2000-01-01", "until": "now"})[1]["total"] == every["total"]
    _, page = api("GET", "/api/search", query={"q": "tokyo", "prefix": "run/s1/", "limit": 1, "offset": 1})
    assert [t["thread"] for t in page["threads"]] == ["run/s1/failed"] and page["total"] == 2
    status, err = api("GET", "/api/search", query={"since": "the day after"})
    assert status == 400 and "cannot read date" in err["error"]["message"]


# -- actions ------------------------------------------------------------------------------------


def test_continue_run_rules(api, repo):
    # COMPLETED, from an inner boundary: a new run forked there; the source does not move.
    before = api("GET", "/api/runs/{run_id}", run_id="done")[1]["run"]["checkpoint_id"]
    status, made = api("POST", "/api/runs/{run_id}/continue", {"continue_from": 6, "input": "and Berlin?"},
                       run_id="done")
    assert status == 200 and made["forked"] and made["forked_from_run_id"] == "done"
    assert made["forked_from_message_index"] == 5 and made["message_index"] == 6  # 5 kept (pair-safe) + input
    assert made["head"] and made["status"] == "RUNNING"
    _, new = api("GET", "/api/runs/{run_id}", run_id=made["run_id"])
    assert new["run"]["messages"][-1] == {**new["run"]["messages"][-1], "role": "user", "content": "and Berlin?"}
    assert new["owner_status"]["state"] == "stale"  # detached: an agent takes it over
    assert api("GET", "/api/runs/{run_id}", run_id="done")[1]["run"]["checkpoint_id"] == before
    _, line = api("GET", "/api/threads/{thread}", thread="run/s1/done")
    assert made["thread"] in [f["thread"] for f in line["forks"]]

    # ERROR, in place from an earlier boundary: a rewind; the old tail stays, as a superseded line.
    _, tl = api("GET", "/api/runs/{run_id}/checkpoints", run_id="failed")
    status, again = api("POST", "/api/runs/{run_id}/continue", {"continue_from": 5}, run_id="failed")
    assert status == 200 and not again["forked"] and again["run_id"] == "failed" and again["message_index"] == 5
    _, after = api("GET", "/api/runs/{run_id}/checkpoints", run_id="failed")
    assert {e["id"] for e in tl["checkpoints"]} <= {e["id"] for e in after["checkpoints"]}
    assert any(not e["current"] for e in after["checkpoints"])

    status, err = api("POST", "/api/runs/{run_id}/continue", {}, run_id="stopped")
    assert status == 409 and err["error"]["type"] == "RunStateError" and "CANCELLED" in err["error"]["message"]
    status, err = api("POST", "/api/runs/{run_id}/continue", None, run_id="w1")
    assert status == 409 and err["error"]["type"] == "RunOwnedError"
    assert api("POST", "/api/runs/{run_id}/continue", {"continue_from": 99}, run_id="done")[0] == 400
    status, err = api("POST", "/api/runs/{run_id}/continue", {"continue_from": "middle"}, run_id="done")
    assert status == 400 and err["error"]["message"].startswith("continue_from:")
    assert api("POST", "/api/runs/{run_id}/continue", {}, run_id="nobody")[0] == 404


def test_fork_run_reset_delete(api):
    status, forked = api("POST", "/api/runs/{run_id}/fork", {"at": 7, "new_run_id": "done-2"}, run_id="done")
    assert status == 200 and forked["run_id"] == "done-2" and forked["status"] == "PENDING"
    assert forked["forked_from_message_index"] == 7 and forked["thread"] == "run/s1/done-2"
    assert api("POST", "/api/runs/{run_id}/fork", {"new_run_id": "done-2"}, run_id="done")[0] == 400

    status, made = api("POST", "/api/fork", {"checkpoint": "note-0", "thread": "notes/zero"})
    assert status == 200 and made["thread"] == "notes/zero" and made["step"] == 0 and made["id"] != "note-0"
    assert api("POST", "/api/fork", {"checkpoint": "note-0", "thread": "notes/zero"})[0] == 409
    assert api("POST", "/api/fork", {"checkpoint": "note-0"})[0] == 400

    status, moved = api("POST", "/api/reset", {"thread": "notes", "to": "note-0"})
    assert status == 200 and moved["id"] == "note-0" and moved["step"] == 0
    assert api("POST", "/api/reset", {"thread": "notes", "to": "nothing-here"})[0] == 404
    assert api("POST", "/api/reset", {"thread": "notes", "to": "run/s1/done"})[0] == 400  # another thread's

    # Deleting a thread's only checkpoint deletes the thread; a checkpoint inside a line re-parents.
    status, gone = api("DELETE", "/api/checkpoints/{name}", name="notes/zero")
    assert status == 200 and gone["deleted"] == made["id"] and gone["head"] is None
    assert api("DELETE", "/api/threads/{thread}", thread="notes/zero")[0] == 404
    alt_head = api("GET", "/api/threads/{thread}", thread="notes/alt")[1]["line"][0]["id"]
    status, dropped = api("DELETE", "/api/threads/{thread}", thread="notes/alt")
    assert status == 200 and dropped["head"] is None and dropped["deleted"]
    assert api("GET", "/api/checkpoints/{name}", name=alt_head)[0] == 404
    names = [t["thread"] for t in api("GET", "/api/threads")[1]["threads"]]
    assert "notes/zero" not in names and "notes/alt" not in names and "run/s1/done-2" in names


def test_continue_with_an_agent(repo):
    s = Server(repo[0], "--agent", "tests.workers.server_agent:scripted")
    try:
        api = API(s.url, headers=s.auth)
        status, made = api("POST", "/api/runs/{run_id}/continue", {"continue_from": 7, "input": "and Berlin?"},
                           run_id="done")
        assert status == 200 and made["agent"] and made["forked"] and made["forked_from_message_index"] == 7
        # The server's agent owns the new run while it records: continuing it meanwhile is refused.
        status, err = api("POST", "/api/runs/{run_id}/continue", {}, run_id=made["run_id"])
        assert status == 409 and err["error"]["type"] == "RunOwnedError"
        deadline = time.monotonic() + 30
        while (run := api("GET", "/api/runs/{run_id}", run_id=made["run_id"])[1])["run"]["status"] != "COMPLETED":
            assert time.monotonic() < deadline, run["run"]["status"]
            time.sleep(0.1)
        messages = run["run"]["messages"]
        assert messages[7]["content"] == "and Berlin?" and messages[-1]["content"].startswith("Answer:")
        assert run["owner_status"]["state"] == "none"
        _, tl = api("GET", "/api/runs/{run_id}/checkpoints", run_id=made["run_id"])
        assert [e["reason"] for e in tl["checkpoints"]] == ["fork", "tool-batch", "tool-batch", "tool-batch", "end"]
    finally:
        assert s.stop() == 0
    bad = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo[0]), "serve", "--agent", "nowhere:x"],
                         capture_output=True, text=True, env=child_env(), timeout=30, stdin=subprocess.DEVNULL)
    assert bad.returncode == 2 and "--agent 'nowhere:x'" in bad.stderr


# -- another process writes while the server runs ---------------------------------------------

WRITER = """
import sys, time
from samples.scripted_agent import QUESTION, RESEARCH_PLAN, ScriptedModel, drive, make_tools
from qvc.runs import Runs
with Runs(sys.argv[1]) as runs:
    with runs.start(QUESTION, session_id="live", run_id=sys.argv[2]) as rec:
        drive(rec, ScriptedModel(RESEARCH_PLAN), make_tools(), on_checkpoint=lambda rec: time.sleep(0.3))
"""


class EventStream:
    """Reads the server-sent events of /api/events in a thread."""

    def __init__(self, url: str, headers: dict | None = None):
        parts = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        self.conn.request("GET", parts.path, headers=headers or {})
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200 and self.resp.headers["content-type"].startswith("text/event-stream")
        self.events: list = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        name = None
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    self.events.append((name, json.loads(line[6:])))
        except Exception:  # the stream was closed under the reader: it is done
            pass

    def wait(self, predicate, timeout: float = 20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in self.events if predicate(*e)]
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"no such event in {self.events}")

    def close(self) -> None:
        self.conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; closing alone would wait for it
        self.thread.join(10)
        self.conn.close()


def test_writer_process_seen_by_api_and_events(api, repo, server):
    stream = EventStream(server.url + "api/events")
    try:
        stream.wait(lambda name, data: name == "ready")
        run_id = "live-" + uuid.uuid4().hex[:6]
        writer = subprocess.run([sys.executable, "-c", WRITER, str(repo[0]), run_id], env=child_env(),
                                capture_output=True, text=True, timeout=60, cwd=str(ROOT))
        assert writer.returncode == 0, writer.stderr
        thread = f"run/live/{run_id}"
        checkpoints = stream.wait(lambda name, data: name == "change" and data["thread"] == thread
                                  and data["kind"] == "checkpoint")
        assert checkpoints[0][1]["previous"] is None and checkpoints[0][1]["commit"]
        # The 4 checkpoints came 0.3 s apart: each is one event, in order.
        stream.wait(lambda name, data: name == "change" and data["thread"] == thread and data["kind"] == "checkpoint"
                    and data["previous"] is not None)
        _, tl = api("GET", "/api/runs/{run_id}/checkpoints", run_id=run_id)
        assert [e["message_index"] for e in tl["checkpoints"]] == [4, 6, 8, 9]
        _, head = api("GET", "/api/threads/{thread}", thread=thread)
        assert stream.wait(lambda name, data: name == "change" and data.get("commit") == head["head"])
        assert head["line"][0]["status"] == "COMPLETED"
    finally:
        stream.close()


# -- access: token, read-only, loopback ---------------------------------------------------------


def test_token_and_read_only(repo):
    token = "s3cret-" + uuid.uuid4().hex
    s = Server(repo[0], "--read-only", env={"QVC_SERVE_TOKEN": token})
    try:
        assert f"?token={token}" in s.line and "(read-only)" in s.line
        status, headers, raw = request(s.url + "api/runs")
        assert status == 401 and json.loads(raw)["error"]["type"] == "unauthorized"
        assert headers["WWW-Authenticate"] == "Bearer"
        api = API(s.url, headers={"Authorization": f"Bearer {token}"})
        assert API(s.url, spec=api.spec)("GET", "/api/runs/{run_id}", run_id="done")[0] == 401  # as documented
        assert request(s.url + "api/runs", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert request(s.url + "openapi.json")[0] == 401
        _, repo_info = api("GET", "/api/repository")
        assert repo_info["read_only"] is True
        # With a token, other host names (a reverse proxy) are fine: the token is the guard.
        assert request(s.url + "api/repository", headers={"Authorization": f"Bearer {token}",
                                                          "Host": "runs.example.org"})[0] == 200
        for method, template, params in [("POST", "/api/runs/{run_id}/continue", {"run_id": "done"}),
                                         ("POST", "/api/runs/{run_id}/fork", {"run_id": "done"}),
                                         ("POST", "/api/reset", {}), ("POST", "/api/fork", {}),
                                         ("DELETE", "/api/threads/{thread}", {"thread": "notes"}),
                                         ("DELETE", "/api/checkpoints/{name}", {"name": "note-0"})]:
            status, err = api(method, template, {}, **params)
            assert status == 403 and err["error"]["type"] == "read_only"
        # The page: ?token= once sets a cookie that its assets and event stream then carry.
        status, headers, _ = request(s.url + f"?token={token}")
        assert status == 200 and "qvc_token=" in headers["set-cookie"] and "HttpOnly" in headers["set-cookie"]
        cookie = headers["set-cookie"].split(";")[0]
        assert request(s.url + "static/app.js", headers={"Cookie": cookie})[0] == 200
        assert request(s.url + "static/app.js")[0] == 401
    finally:
        assert s.stop() == 0


def test_other_names_and_other_sites_refused(server):
    """Without a token: loopback Host names only (DNS rebinding), and no actions from other sites' pages."""
    port = server.url.rsplit(":", 1)[1].strip("/")
    status, _, raw = request(server.url + "api/repository", headers={"Host": f"evil.example:{port}"})
    assert status == 403 and json.loads(raw)["error"]["type"] == "forbidden_host"
    assert request(server.url + "api/repository", headers={"Host": f"localhost:{port}"})[0] == 200
    for origin in ("http://evil.example", f"http://localhost:{int(port) + 1}", "null"):
        status, _, raw = request(server.url + "api/reset", "POST", {}, headers={"Origin": origin})
        assert status == 403 and json.loads(raw)["error"]["type"] == "cross_origin", origin
    # The server's own page (same origin) and clients that send no Origin reach the endpoint.
    same = "http://" + server.url.split("//", 1)[1].rstrip("/")
    assert request(server.url + "api/reset", "POST", {}, headers={"Origin": same, **server.auth})[0] == 400
    assert request(server.url + "api/reset", "POST", {}, headers=server.auth)[0] == 400


def test_actions_need_the_token_of_this_start(server, api):
    """Without --token any local process can reach the port: reads stay open, but every action
    needs the random token made at start (the printed URL carries it; the page sends it)."""
    assert server.token and len(server.token) >= 24 and server.page == f"{server.url}?token={server.token}"
    assert f"at {server.page};" in server.line
    fork = {"checkpoint": "note-0", "thread": "notes/guarded"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"qvc_token={server.token[:-1]}"}):
        for method, path in (("POST", "api/fork"), ("DELETE", "api/threads/notes"), ("POST", "api/reset")):
            status, answer, raw = request(server.url + path, method, fork if method == "POST" else None, headers)
            assert status == 401 and json.loads(raw)["error"]["type"] == "unauthorized", (method, path, raw)
            assert "token" in json.loads(raw)["error"]["message"] and answer["WWW-Authenticate"] == "Bearer"
    assert API(server.url, spec=api.spec)("POST", "/api/fork", fork)[0] == 401  # as the document declares
    assert request(server.url + "api/threads/notes/guarded")[0] == 404  # refused: nothing was done
    assert request(server.url + "api/repository")[0] == 200  # reads need no token on loopback
    assert request(server.url + "static/app.js")[0] == 200 and request(server.url)[0] == 200
    status, _, raw = request(server.url + "api/fork", "POST", fork, server.auth)
    assert status == 200 and json.loads(raw)["thread"] == "notes/guarded"
    query = server.url + "api/threads/notes/guarded?token=" + server.token  # the ?token= of the URL works too
    assert request(query, "DELETE")[0] == 200
    # The page sends it: one function adds the header to its requests.
    app_js = request(server.url + "static/app.js")[2].decode()
    assert "function authHeaders()" in app_js and "headers: authHeaders()" in app_js


def test_ctrl_c_with_an_event_stream_open_stops_cleanly(repo, server):
    s = Server(repo[0])
    stream = EventStream(s.url + "api/events")
    try:
        assert stream.wait(lambda name, data: name == "ready")
        assert s.token and s.token != server.token  # a token per start
        s.proc.send_signal(signal.SIGINT)
        s.proc.wait(timeout=8)
        out, err = s.proc.stdout.read(), s.proc.stderr.read()
        assert s.proc.returncode == 0, err
        assert "Traceback" not in err and "ERROR" not in err and err == "", err
        assert out == f"Stopped serving {repo[0]}\n"
        stream.thread.join(5)
        assert not stream.thread.is_alive()  # the server ended the stream
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        stream.conn.close()
        s.stop()


def test_non_loopback_needs_a_token(repo):
    done = subprocess.run([sys.executable, "-m", "qvc", "--repo", str(repo[0]), "serve", "--host", "0.0.0.0"],
                          capture_output=True, text=True, env=child_env(), timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "without a token" in done.stderr and len(done.stderr.splitlines()) == 1


def test_server_stack_is_imported_only_by_serve(repo):
    probe = ("import sys, qvc, qvc.cli, qvc.runs, qvc.readers.views; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'starlette')))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=child_env(), timeout=30)
    assert done.stdout.strip() == "[]", done.stderr
    # Without the extra, `qvc serve` says what to install, in one line.
    missing = ("import sys; sys.modules['fastapi'] = None; from qvc.cli import main; "
               f"sys.exit(main(['--repo', {str(repo[0])!r}, 'serve']))")
    done = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True, env=child_env(), timeout=30)
    assert done.returncode == 1 and done.stderr.strip() == (
        'qvc: qvc serve needs the server extra (fastapi is missing): pip install "qvc[server]"')
