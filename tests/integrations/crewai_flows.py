"""Flows the CrewAI tests run, in processes of their own too (no model needed: plain methods)."""

from __future__ import annotations

import time

from crewai.flow.flow import Flow, listen, router, start
from crewai.flow.persistence import persist


class Steps(Flow):
    """K tool-like steps: each method adds one item, so each saves one state."""

    @start()
    def first(self) -> str:
        self.state.setdefault("items", [])
        self.state["items"].append("a")
        return "a"

    @listen(first)
    def second(self) -> str:
        self.state["items"].append("b")
        return "b"

    @listen(second)
    def third(self) -> str:
        self.state["items"].append("c")
        return "c"


def persisted(p: object) -> type:
    """``Steps`` with ``@persist(p)`` on the class: every method's state is saved."""

    @persist(p)
    class PersistedSteps(Flow):
        @start()
        def first(self) -> str:
            self.state.setdefault("items", [])
            self.state["items"].append("a")
            return "a"

        @listen(first)
        def second(self) -> str:
            self.state["items"].append("b")
            return "b"

        @listen(second)
        def third(self) -> str:
            self.state["items"].append("c")
            return "c"

    return PersistedSteps


def item(n: int) -> str:
    """The ``n``-th tool result of :func:`tool_loop` (the same in every process)."""
    return f"result {n}: " + "searched, found, noted; " * 10


def tool_loop(p: object, steps: int, delay: float = 0.0) -> type:
    """CrewAI's loop of ``steps`` tool steps with ``@persist(p)``: ``tool`` (a start method that also
    listens to ``"again"``) appends :func:`item` to the state's ``results`` after ``delay`` seconds,
    the router ``route`` sends ``"again"`` until there are ``steps`` results, then ``"done"`` to
    ``answer``. A flow resumed from its saved state goes on from the results it has."""

    @persist(p)
    class ToolLoop(Flow):
        @start("again")
        def tool(self) -> int:
            done = self.state.setdefault("results", [])
            if delay:
                time.sleep(delay)
            done.append(item(len(done)))
            return len(done)

        @router(tool)
        def route(self) -> str:
            return "again" if len(self.state["results"]) < steps else "done"

        @listen("done")
        def answer(self) -> str:
            self.state["answer"] = f"{len(self.state['results'])} results"
            return self.state["answer"]

    return ToolLoop
