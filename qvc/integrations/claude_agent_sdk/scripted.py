"""Offline runs of the Claude Agent SDK's real loop: a scripted model server on 127.0.0.1 that speaks
the part of the Anthropic Messages API the Claude Code program (which the SDK drives) uses, so
``query`` runs with no key and no network.

The SDK starts its bundled ``claude`` program; :func:`model_env` points it at this server
(``ANTHROPIC_BASE_URL``), with a placeholder key and no traffic but the model's. The server
answers each ``POST /v1/messages`` (streamed as server-sent events, or as one JSON body) from a
*plan*: a prompt registered with :meth:`ScriptedModel.plan`, and what the model does about it, a
number of tool calls then an answer::

    with ScriptedModel() as model:
        model.plan("Look up items 0 to 2.", calls=[(LOOKUP, {"n": n}) for n in range(3)],
                   answer="Items 0 to 2 are looked up.")
        options = offline_options(QvcSessionStore("runs.qvc"), model, cwd, config_dir)
        session_id, answer = await ask("Look up items 0 to 2.", options)

For each request the server finds the newest user text that starts with a planned prompt (the
prompt of a turn, or the task a subagent was given: the ``Agent`` tool's ``prompt``), counts the
tool results after it, and makes the next call of the plan or, when all were made, answers.
Requests about nothing planned are answered ``"done"``. Every request is kept
(:attr:`ScriptedModel.requests`), so a test sees what the program sent (a resumed session's
history, say).

:func:`turn_lines` makes a turn's transcript lines without the program, for drivers that write a
local transcript and replay it with the SDK's ``import_session_to_store`` (the tests' killed
writer, the benchmark).

Imports the SDK only inside :func:`offline_options` and :func:`ask`.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

#: The Claude Code program's settings for an offline run: no telemetry, no update checks, no
#: error reports (nothing but the model's requests leaves the process), and none of the settings
#: of the caller's environment that would send those requests to another provider or account.
QUIET = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
         "DISABLE_ERROR_REPORTING": "1", "DISABLE_COST_WARNINGS": "1", "CLAUDE_CODE_USE_BEDROCK": "0",
         "CLAUDE_CODE_USE_VERTEX": "0", "CLAUDE_CODE_USE_FOUNDRY": "0", "ANTHROPIC_AUTH_TOKEN": ""}


@dataclass
class Plan:
    """What the model does about a prompt: ``calls`` (``(tool name, input)``), one per model turn,
    then ``answer``."""

    prompt: str
    calls: List[Tuple[str, Dict[str, Any]]] = field(default_factory=list)
    answer: str = "done"


def _texts(message: Dict[str, Any]) -> List[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]


def _results(message: Dict[str, Any]) -> int:
    content = message.get("content")
    return sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result") \
        if isinstance(content, list) else 0


class ScriptedModel:
    """The server (see the module docstring). A context manager: started on enter (a free port on
    127.0.0.1, :attr:`url`), stopped on exit."""

    def __init__(self) -> None:
        self.plans: List[Plan] = []
        self.requests: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._ids = 0

    def plan(self, prompt: str, calls: Optional[List[Tuple[str, Dict[str, Any]]]] = None,
             answer: str = "done") -> Plan:
        """Register what the model does about ``prompt`` (a later plan for the same prompt wins)."""
        made = Plan(prompt, list(calls or []), answer)
        with self._lock:
            self.plans.insert(0, made)
        return made

    @property
    def url(self) -> str:
        assert self._server is not None, "the scripted model is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ScriptedModel:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, b"{}")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    request = json.loads(raw or b"{}")
                except ValueError:
                    request = {}
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._send(200, b'{"input_tokens": 10}')
                elif path.endswith("/v1/messages"):
                    body, kind = model._answer(request)
                    self._send(200, body, kind)
                else:
                    self._send(200, b"{}")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- the model -------------------------------------------------------------------------------

    def _step(self, request: Dict[str, Any]) -> Tuple[Optional[Plan], int]:
        """The plan the request is about and how many of its calls were answered."""
        messages = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        with self._lock:
            plans = list(self.plans)
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") != "user":
                continue
            for text in _texts(messages[i]):
                for plan in plans:
                    if text.strip().startswith(plan.prompt):
                        return plan, sum(_results(m) for m in messages[i + 1:])
        return None, 0

    def _answer(self, request: Dict[str, Any]) -> Tuple[bytes, str]:
        with self._lock:
            self.requests.append(request)
            self._ids += 1
            n = self._ids
        plan, done = self._step(request)
        if plan is not None and done < len(plan.calls):
            name, args = plan.calls[done]
            block: Dict[str, Any] = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": name, "input": args}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": plan.answer if plan is not None else "done"}
            stop = "end_turn"
        message = {"id": f"msg_{n:04d}", "type": "message", "role": "assistant",
                   "model": request.get("model") or "scripted", "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}
        if not request.get("stream"):
            whole = dict(message, content=[block], stop_reason=stop, usage={"input_tokens": 10, "output_tokens": 5})
            return json.dumps(whole).encode(), "application/json"
        if block["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events = [("message_start", {"type": "message_start", "message": message}),
                  ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
                  ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
                  ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                  ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                     "usage": {"output_tokens": 5}}),
                  ("message_stop", {"type": "message_stop"})]
        body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return body.encode(), "text/event-stream"


def model_env(model: ScriptedModel, config_dir: str) -> Dict[str, str]:
    """The environment for ``ClaudeAgentOptions(env=...)`` of an offline run on ``model``: the
    program's state (``CLAUDE_CONFIG_DIR``, its local transcripts included) in ``config_dir``."""
    os.makedirs(config_dir, exist_ok=True)
    return {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-offline-scripted-model",
            "CLAUDE_CONFIG_DIR": config_dir, **QUIET}


def _iso_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def turn_lines(session_id: str, prompt: str, *, steps: int = 1, answer: str = "done", parent: Optional[str] = None,
               cwd: str = "/", tool: str = "mcp__qvc__lookup", sidechain: bool = False,
               agent_id: Optional[str] = None) -> List[Dict[str, Any]]:
    """The transcript lines of one turn in the shape the Claude Code program writes them (a user
    prompt, ``steps`` tool calls each answered by a tool result, the answer), chained by
    ``parentUuid`` from ``parent`` (the previous turn's last line): for offline drivers that write
    a local transcript without running the program (the SDK's ``import_session_to_store`` replays
    it into a store), as the tests' killed writers and the benchmark do. ``sidechain`` and
    ``agent_id`` make them a subagent's."""
    base = {"isSidechain": sidechain, "userType": "external", "cwd": cwd, "sessionId": session_id,
            "version": "scripted", **({"agentId": agent_id} if agent_id else {})}
    out: List[Dict[str, Any]] = []

    def add(kind: str, message: Dict[str, Any]) -> None:
        nonlocal parent
        line = {"parentUuid": parent, **base, "type": kind, "message": message, "uuid": str(uuid.uuid4()),
                "timestamp": _iso_now()}
        out.append(line)
        parent = line["uuid"]

    add("user", {"role": "user", "content": prompt})
    for i in range(steps):
        call = f"toolu_{uuid.uuid4().hex[:20]}"
        add("assistant", {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
                          "model": "scripted", "content": [{"type": "tool_use", "id": call, "name": tool,
                                                            "input": {"n": i}}],
                          "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}})
        add("user", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                                  "content": f"value {i}"}]})
    add("assistant", {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
                      "model": "scripted", "content": [{"type": "text", "text": answer}], "stop_reason": "end_turn",
                      "usage": {"input_tokens": 10, "output_tokens": 5}})
    return out


def write_lines(path: str, lines: List[Dict[str, Any]]) -> None:
    """Append ``lines`` to the JSONL transcript at ``path`` (created with its directories), as the program does."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))


#: The tool of offline runs, as the model names it: ``lookup`` on the in-process MCP server ``qvc``.
LOOKUP = "mcp__qvc__lookup"


def offline_options(store: Any, model: ScriptedModel, cwd: str, config_dir: str, **more: Any) -> Any:
    """``ClaudeAgentOptions`` of an offline run in ``cwd`` on ``model``, mirrored into ``store`` (the
    one line a user changes: ``session_store=``), with one real tool, ``lookup(n)`` (an in-process
    MCP tool answering ``"value <n>"``), allowed as the ``Agent`` tool (subagents) is; ``more``
    are further options (``resume=``, ``session_store_flush=``, ...). Imports the SDK."""
    from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

    @tool("lookup", "Look up the value of item n.", {"n": int})
    async def lookup(args: Dict[str, Any]) -> Dict[str, Any]:
        return {"content": [{"type": "text", "text": f"value {args['n']}"}]}

    os.makedirs(cwd, exist_ok=True)
    return ClaudeAgentOptions(session_store=store, env=model_env(model, config_dir), cwd=cwd,
                              mcp_servers={"qvc": create_sdk_mcp_server("qvc", tools=[lookup])},
                              allowed_tools=[LOOKUP, "Agent"], **more)


async def ask(prompt: str, options: Any) -> Tuple[str, str]:
    """Run one ``query`` of the SDK to its end; its session id and result text (``AssertionError``
    if it failed). Imports the SDK."""
    from claude_agent_sdk import ResultMessage, query

    found = None
    async for message in query(prompt=prompt, options=options):
        if isinstance(message, ResultMessage):
            found = message
    assert found is not None and not found.is_error, found
    return found.session_id, found.result or ""
