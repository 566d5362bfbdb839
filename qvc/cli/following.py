"""Following a repository live (:mod:`qvc.readers.watch`): ``qvc watch``, and the follow part of
``qvc log --follow`` (:func:`follow_log`, which :mod:`qvc.cli.history` calls)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Callable

import click

from qvc.cli.app import cli, complete_names, session, silence_stdout
from qvc.cli.output import out, short, style


def stream(watcher, show, first=()) -> None:
    """Print the lines of ``first``, then the lines ``show(event)`` returns as events come,
    flushed, until Ctrl-C, SIGTERM or a closed pipe (all a quiet exit 0)."""
    import signal  # deferred: start-up speed (only `watch` and `log --follow` need it)
    import warnings

    # watchdog warns when its recursive watch registers again a directory that came back (a
    # thread's refs/qvc/superseded/ directory after a reset, a delete and a reset): harmless, and
    # one line of noise on stderr per occurrence
    warnings.filterwarnings("ignore", message=r"Callback with id .* already exists", category=RuntimeWarning)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # SIGINT too: a shell starts a background job (`qvc watch &` in a script) with SIGINT
    # ignored, and Python then leaves it ignored, so Ctrl-C or `kill -INT` would not end it
    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with watcher:
            for line in first:
                out(line)
            for event in watcher:
                for line in show(event):
                    out(line)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:  # `qvc watch | head -3`: a quiet end, as every command's (app.main)
        silence_stdout()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def event_text(e) -> str:
    """What an event says, without its kind or time (``qvc watch`` and ``qvc log --follow`` lines)."""
    return {
        "checkpoint": lambda: f"{e.thread_id} {short(e.checkpoint_id)} step {e.step} · {e.source} "
                              f"{style(e.commit[:7], fg='yellow')}",
        "fork": lambda: f"{e.thread_id} from {e.from_thread} {short(e.from_checkpoint_id)}",
        "reset": lambda: f"{e.thread_id} {e.previous[:7]} -> {style(e.commit[:7], fg='yellow')} "
                         f"{short(e.checkpoint_id)} step {e.step}{f' ({e.cause})' if e.cause else ''}",
        "delete": lambda: f"{e.thread_id} (was {e.previous[:7]})",
        "rename": lambda: f"{e.from_thread} -> {e.thread_id}",
        "writes": lambda: f"{e.thread_id} {short(e.checkpoint_id or '?')} {(e.commit or '')[:7]}",
        "head": lambda: e.thread_id if e.thread_id is not None else f"detached at {(e.commit or '')[:7]}",
    }[e.kind]()


def event_line(e) -> str:
    """One event as a line of text (``--json`` prints :meth:`qvc.readers.watch.WatchEvent.to_json`)."""
    return f"{datetime.fromtimestamp(e.observed):%H:%M:%S} {style(f'{e.kind:<10}', fg='cyan')} {event_text(e)}"


@cli.command()
@click.argument("threads", nargs=-1, shell_complete=complete_names)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--poll", "poll", type=click.FloatRange(min=0.001), metavar="SECONDS",
              help="Poll the refs every SECONDS instead of waiting for inotify.")
def watch(threads: tuple[str, ...], as_json: bool, poll: float | None) -> None:
    """Print checkpoints, forks, resets, deletions, renames, pending writes and HEAD moves as
    other processes make them, one line each, until interrupted (default: every thread).

    \b
    Example:
      qvc watch
      qvc watch run-7 --json | jq .id
    """
    from qvc.readers.watch import watch as watch_repository  # deferred: start-up speed

    store = session().store()
    kw = {"hints": "poll", "poll_interval": poll} if poll else {}
    show = (lambda e: [json.dumps(e.to_json(), ensure_ascii=False)]) if as_json else (lambda e: [event_line(e)])
    stream(watch_repository(store, threads or None, **kw), show)


#: What ``qvc log --follow`` shows as lines of their own, besides new checkpoints.
NOTES = ("reset", "fork", "delete", "rename")


def follow_log(store, name: str | None, limit: int | None, as_json: bool,
               entry_lines: Callable[..., list[str]], compact: bool = False, raw: bool = False) -> None:
    """``qvc log --follow``: the thread's log oldest first (with ``limit``: its newest ``limit``
    checkpoints, as ``tail -n``), then each new checkpoint as a log entry, printed as
    ``entry_lines(entry, head)``, and resets, forks, deletions and renames of the thread as lines
    of their own (``reset: ...``), until interrupted. A run's checkpoints are named ``RUN@N`` as
    ``qvc log`` names them (:func:`qvc.readers.views.number_entries`), and the fields each changed as
    its viewer shows them unless ``raw``. ``as_json``: one object per line, each with
    a ``kind``: ``checkpoint`` for log entries (their ``qvc log --json`` form), else the event's
    ``qvc watch --json`` form. ``compact``: entries are one line each, so notes have no blank
    line after them."""
    # deferred: start-up speed
    from qvc.readers.log import ViewedNames, entry, log
    from qvc.readers.views import number_entries
    from qvc.readers.watch import watch as watch_repository

    head = store.current()
    thread = head.thread if name in (None, "HEAD") else name
    if thread is None:
        raise click.UsageError("HEAD is detached: name the thread to follow")
    watcher = watch_repository(store, [thread])  # before the log is read: nothing falls in between
    shown: set[str] = set()

    def lines(e) -> list[str]:
        shown.add(e.commit)
        return [json.dumps({"kind": "checkpoint", **e.to_json()}, ensure_ascii=False)] if as_json \
            else entry_lines(e, head)

    def show(event) -> list[str]:
        if event.kind in NOTES:
            return [json.dumps(event.to_json(), ensure_ascii=False)] if as_json else \
                [f"{style(event.kind + ':', fg='cyan')} {event_text(event)}"] + ([] if compact else [""])
        if event.kind != "checkpoint" or event.commit in shown:
            return []
        new = entry(store, event.commit, {event.commit: [thread]}, viewed=names)
        return lines(next(number_entries(store, [new])))  # numbered now: the run grew since

    names = None if raw else ViewedNames(store)
    tip = store.head(thread)
    old = list(number_entries(store, log(store, tip, limit=limit, viewed=not raw)))[::-1] if tip is not None else []
    first = (line for e in old for line in lines(e))
    stream(watcher, show, first)
