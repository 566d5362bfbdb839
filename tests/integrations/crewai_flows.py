"""Flows the CrewAI tests run, in processes of their own too (no model needed: plain methods)."""

from __future__ import annotations

from crewai.flow.flow import Flow, listen, start
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
