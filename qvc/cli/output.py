"""How the ``qvc`` commands print: colours (when the session has them on), JSON, the pager,
the terminal's size, and the short forms of times and checkpoint ids people read."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from qvc.cli.app import Session, session
from qvc.lazy import Pattern

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r"}
_CONTROL = Pattern(r"\x1b\[[0-9;]*m|[\x00-\x1f\x7f-\x9f]")  # colours (ours, kept), then controls


def _escape(char: str) -> str:
    return _NAMED.get(char) or "".join(f"\\{b:03o}" for b in char.encode("utf-8"))


def quoted(text: str, keep: str = "") -> str:
    """``text`` with control characters escaped as git escapes them in paths (``\\n``, ``\\t``,
    ``\\001``...), colours (SGR sequences) and the characters in ``keep`` left as they are."""
    return _CONTROL.sub(lambda m: m.group(0) if m.group(0)[0] == "\x1b" and len(m.group(0)) > 1
                        or m.group(0) in keep else _escape(m.group(0)), text)


def qname(name: str | None) -> str:
    """A thread name (or another name people typed or a program chose) for a line of output: as
    it is when it is printable and holds no ``"`` or ``\\``, else in double quotes with control
    characters, characters that do not print (a bidi override, a zero-width space), ``\\`` and
    ``"`` escaped (git's quoting of unusual paths), so one name is always one row, reads as the
    name it is, and no two names look alike (``a<newline>b`` is ``"a\\nb"``, the name ``"a\\nb"``
    is ``"\\"a\\\\nb\\""``)."""
    if name is None:
        return ""
    if not _CONTROL.search(name) and name.isprintable() and '"' not in name and "\\" not in name:
        return name
    inner = name.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else _escape(c) for c in inner) + '"'


def style(text: str, **kw: Any) -> str:
    """``text`` in click's style ``kw`` when colours are on, else unchanged."""
    return click.style(text, **kw) if session().color else text


def out(text: str = "") -> None:
    """Print one line on stdout, control characters in it escaped (tabs kept: they separate
    columns), so a name holding a newline stays on its row."""
    click.echo(quoted(text, "\t"), color=session().color)


def warn(text: str) -> None:
    """Print ``qvc: warning: text`` on stderr (the command goes on), control characters escaped."""
    click.echo(f"qvc: warning: {quoted(text)}", err=True)


def warn_damaged(store, shown: str | None = None) -> None:
    """One warning line for each thread whose ref file holds no ref (which listings skip),
    but ``shown``, a thread already warned of."""
    for thread, why in store.damaged_threads():
        if thread != shown:
            warn(f"thread {thread!r} is damaged: {why}")


def emit_json(data: Any) -> None:
    """Print ``data`` as indented JSON (the stable ``--json`` forms)."""
    import json  # deferred: start-up speed (only --json needs it)

    click.echo(json.dumps(data, ensure_ascii=False, indent=2, allow_nan=False))


def page(lines: list[str], keep: str = "") -> None:
    """Print ``lines``; through a pager when they do not fit a terminal (never when piped).
    Control characters are escaped, except those in ``keep`` (``"\\t"``: tabs separate columns)."""
    s = session()
    text = "\n".join(quoted(line, keep) for line in lines)  # a newline inside a line stays in its row
    height = terminal_size((80, 24)).lines
    if s.pager and sys.stdout.isatty() and sys.stdin.isatty() and len(lines) > height - 1:
        os.environ.setdefault("LESS", "FRX")  # like git: quit if one screen, keep colors
        pager = os.environ.get("QVC_PAGER") or os.environ.get("PAGER")
        if pager is not None:
            os.environ["PAGER"] = pager
        click.echo_via_pager(text + "\n", color=s.color)
    elif text:
        click.echo(text, color=s.color)


def terminal_size(fallback: tuple[int, int]) -> os.terminal_size:
    """The terminal's size, ``$COLUMNS``/``$LINES`` first (what shutil does, without importing it)."""
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())
    except (AttributeError, ValueError, OSError):
        size = os.terminal_size(fallback)
    columns = int(os.environ["COLUMNS"]) if os.environ.get("COLUMNS", "").isdigit() else size.columns
    lines = int(os.environ["LINES"]) if os.environ.get("LINES", "").isdigit() else size.lines
    return os.terminal_size((columns or fallback[0], lines or fallback[1]))


def value_width() -> int:
    """How wide a shortened value may be: the terminal's width less an indent (at least 40)."""
    return max(40, terminal_size((100, 24)).columns - 4)


def short(checkpoint_id: str, store=None) -> str:
    """A checkpoint id short enough to read, unique in ``store`` (default: the store the running
    command opened), as :func:`qvc.readers.log.short_id` writes it: typed back, it resolves."""
    from qvc.readers.log import short_id  # deferred: start-up speed

    if store is None and len(checkpoint_id) > 16:
        ctx = click.get_current_context(silent=True)
        running = ctx.find_object(Session) if ctx is not None else None
        store = running.opened if running is not None else None
    return short_id(checkpoint_id, store)
