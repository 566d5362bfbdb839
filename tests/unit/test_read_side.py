"""The read-side package reads: no module of ``qvc.readers`` calls a method that writes a repository.

Writers live with the store (``qvc.store.fork``) or in ``qvc.edit``. The check is by name: a
call of ``.put(...)``, ``.reset(...)``, ``.transaction(...)`` and the like on anything but the
``os`` module (state files are written with ``os.write``, which changes no repository).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import qvc.readers

READ_SIDE = Path(qvc.readers.__file__).parent
WRITES = {"put", "aput", "put_writes", "aput_writes", "reset", "delete", "adelete", "delete_thread",
          "rename_thread", "checkout", "transaction", "move_ref", "write_checkpoint",
          "fork_checkpoint", "fork_thread", "commit_directory", "put_entries", "put_checkpoint_writes",
          "drop_checkpoints", "prune_thread", "copy_threads", "delete_threads"}


def writes_called(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in WRITES:
            if not (isinstance(func.value, ast.Name) and func.value.id == "os"):
                found.append(f"line {node.lineno}: .{func.attr}(...)")
        elif isinstance(func, ast.Name) and func.id in WRITES:
            found.append(f"line {node.lineno}: {func.id}(...)")
    return found


@pytest.mark.parametrize("path", sorted(READ_SIDE.glob("*.py")), ids=lambda p: p.name)
def test_read_side_calls_no_writer(path):
    assert writes_called(path) == [], f"{path.name} writes; move the writer to qvc.store or qvc.edit"


def test_the_check_finds_a_writer(tmp_path):
    """The check above can fail: a module that forks a thread or puts a checkpoint is caught."""
    sample = tmp_path / "sample.py"
    sample.write_text("def f(store, c):\n    store.put(c)\n    fork_thread(store, 'a', 'b')\n    os.write(1, b'')\n")
    assert writes_called(sample) == ["line 2: .put(...)", "line 3: fork_thread(...)"]
