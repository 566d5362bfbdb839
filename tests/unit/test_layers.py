"""The package's layers stay true: dependencies point downward only, and no import cycle forms.

Every ``import`` in ``qvc/`` counts, including those inside functions (only imports under
``if TYPE_CHECKING:`` are left out: they never run). A module of one layer may import modules of
its own layer or below; packages of the feature layer may import one another as long as no cycle
forms. ``qvc/__init__.py`` (the composition root) and ``qvc/__main__.py`` sit on top.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "qvc"

#: Layer of each top-level part of the package, lowest first.
LAYERS = {
    "qvc.errors": 0, "qvc.types": 0, "qvc.version": 0, "qvc.lazy": 0, "qvc.logs": 0,
    "qvc.codec": 0.5,  # the serializers: every layer above may use them, they use only errors and types
    "qvc.plumbing": 1,
    "qvc.store": 2,
    "qvc.readers": 3, "qvc.edit": 3, "qvc.remotes": 3, "qvc.runs": 3, "qvc.qitos": 3, "qvc.integrations": 3,
    "qvc.server": 4,
    "qvc.cli": 5,
    "qvc": 6, "qvc.__main__": 6,
}


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = modules()


def layer(module: str) -> float:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        found = LAYERS.get(".".join(parts[:n]))
        if found is not None:
            return found
    raise AssertionError(f"{module}: not in any layer; add its package to LAYERS")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(module: str, *, type_checking: bool = False) -> set[str]:
    """The qvc modules ``module`` imports, wherever the import statement stands (with
    ``type_checking``, those under ``if TYPE_CHECKING:`` too)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test) and not type_checking:
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.split(".")[0] == "qvc")
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - child.level + 1])
                    base = f"{base}.{child.module}" if child.module else base
                else:
                    base = child.module or ""
                if base.split(".")[0] != "qvc":
                    continue
                for alias in child.names:  # `from pkg import submodule` imports the submodule
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in MODULES else base)
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    found.discard(module)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_every_import_names_a_real_module():
    for module, targets in GRAPH.items():
        for target in targets:
            assert target in MODULES, f"{module} imports {target}, which is not a module of qvc"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    upward = sorted(t for t in GRAPH[module] if layer(t) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports higher layers: {upward}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_cycles():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles():
    """The check above can fail: a made-up graph with a cycle hidden two steps deep is caught."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_private_names_imported_across_modules():
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qvc"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                assert not private, f"{module} imports private names {private} from {node.module}"


# -- the adapter contract ------------------------------------------------------------------------

INTEGRATIONS = sorted(m for m in MODULES if m == "qvc.integrations" or m.startswith("qvc.integrations."))

@pytest.mark.parametrize("module", INTEGRATIONS)
def test_integrations_import_nothing_from_the_plumbing(module):
    """An adapter builds on the store's public API and the feature layer, never on the plumbing
    (imports inside functions count): what it needs of git, the store offers with a contract."""
    plumbing = sorted(t for t in GRAPH[module] if t == "qvc.plumbing" or t.startswith("qvc.plumbing."))
    assert not plumbing, f"{module} imports the plumbing: {plumbing}"


@functools.cache
def plumbing_names(module: str) -> set[str]:
    """The names ``module`` imports from the plumbing (what a ``from module import NAME`` would re-export)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qvc.plumbing"):
            out.update(a.asname or a.name for a in node.names)
    return out


@pytest.mark.parametrize("module", INTEGRATIONS)
def test_integrations_take_no_plumbing_name_through_the_store(module):
    """Nor through a store module that imported it from the plumbing (``MODE_TREE``,
    ``tree_bytes``, ``object_id`` through ``qvc.store.format``): an adapter builds no git object."""
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("qvc.") and node.module in MODULES:
            taken = sorted(a.name for a in node.names if a.name in plumbing_names(node.module))
            assert not taken, f"{module} takes plumbing names {taken} through {node.module}"


def test_the_plumbing_rule_covers_every_adapter():
    assert {"qvc.integrations.agno.index", "qvc.integrations.langgraph.saver", "qvc.integrations.langgraph.values",
            "qvc.integrations.langgraph.viewer"} <= set(INTEGRATIONS)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m not in INTEGRATIONS))
def test_no_reader_names_an_integration(module):
    """Readers (readers, remotes, watch, the server, the command line) reach an adapter's values
    only through registries (:mod:`qvc.store.viewers`, :mod:`qvc.store.prefixes`), never by
    importing it."""
    named = sorted(t for t in GRAPH[module] if t in INTEGRATIONS)
    assert not named, f"{module} imports integrations: {named}"


def test_imports_inside_functions_count(tmp_path, monkeypatch):
    """A plumbing module that imports another only inside a function still has that edge (so a
    circle through such an import is caught); one under ``if TYPE_CHECKING:`` does not."""
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from qvc.plumbing.repository import Repository\n"
                     "def later():\n    from qvc.plumbing import recovery\n    return recovery\n")
    monkeypatch.setitem(MODULES, "qvc.plumbing.probe", probe)
    assert imports("qvc.plumbing.probe") == {"qvc.plumbing.recovery"}


def test_the_plumbing_has_no_import_cycle_not_even_for_type_checking():
    """Inside the plumbing not even the imports only a type checker runs form a cycle: a
    module the repository calls (recovery) names what it needs of it as a protocol."""
    plumbing = {m: {t for t in imports(m, type_checking=True) if t.startswith("qvc.plumbing")}
                for m in MODULES if m.startswith("qvc.plumbing")}
    assert cycles(plumbing) == []
