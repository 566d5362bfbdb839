"""Reading history: ``qvc log`` (``--follow`` is :mod:`qvc.cli.following`) and ``qvc show``."""

from __future__ import annotations

import re
import sys
from dataclasses import replace

import click

from qvc.cli.app import END_OF_OPTIONS, cli, complete_names, revision, run_names, session
from qvc.cli.output import emit_json, page, qname, short, style, value_width, warn_damaged
from qvc.cli.runs import show_run, shown_name
from qvc.errors import CorruptionError, InvalidInputError, NotFoundError
from qvc.readers.dates import ago, local_date
from qvc.readers.views import number_entries, run_number
from qvc.types import Head


class PathsAfterDashes(click.Command):
    """A command whose arguments after ``--`` are kept apart, as git keeps paths apart from
    revisions (``qvc log run-7 -- messages``): they are in ``ctx.meta["after_dashes"]``."""

    after_dashes_metavar = "FIELD..."

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), f"[-- {self.after_dashes_metavar}]"]

    #: this command reads ``--end-of-options`` itself (the root group turns it into ``--`` for others)
    own_end_of_options = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        dashes = args.index("--") if "--" in args else len(args)
        ctx.meta["after_dashes"] = args[dashes + 1:]
        before = args[:dashes]
        if END_OF_OPTIONS in before:  # git's: what follows is a revision, even `-dash`; fields still after --
            i = before.index(END_OF_OPTIONS)
            before = [*before[:i], "--", *before[i + 1:]]
        return super().parse_args(ctx, before)


class LogCommand(PathsAfterDashes):
    """``qvc log``'s arguments as git reads them: ``-3`` is ``-n 3``, a bare ``--decorate`` is
    ``--decorate=short``, and field names come after ``--``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = min(args.index(mark) if mark in args else len(args) for mark in ("--", END_OF_OPTIONS))
        valued = {name for p in self.params if isinstance(p, click.Option) and not p.is_flag for name in p.opts}
        options: list[str] = []
        for arg in args[:end]:
            if re.fullmatch(r"-\d+", arg) and not (options and options[-1] in valued):  # not --grep -3
                options += ["-n", arg[1:]]
            else:
                options.append("--decorate=short" if arg == "--decorate" else arg)
        return super().parse_args(ctx, options + args[end:])


@cli.command(cls=LogCommand)
@click.argument("names", nargs=-1, metavar="[REVISION...]", shell_complete=complete_names)
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N checkpoints (also -N).")
@click.option("--oneline", is_flag=True, help="One line per checkpoint.")
@click.option("--graph", is_flag=True, help="Draw forks across threads (git's graph, in --topo-order).")
@click.option("--all", "all_", is_flag=True, help="Every thread and the lines superseded by time travel.")
@click.option("--first-parent", is_flag=True, help="Follow only the first parent of each checkpoint.")
@click.option("--topo-order", "order", flag_value="topo", help="A child before its parents, each line together.")
@click.option("--date-order", "order", flag_value="date", help="Newest first, a child before its parents.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of checkpoints.")
@click.option("-f", "--follow", is_flag=True, help="Oldest first, then new checkpoints, resets, forks, deletions.")
@click.option("--reverse", is_flag=True, help="Oldest first (after -n has chosen the newest N).")
@click.option("--since", "--after", "since", metavar="DATE", help="Only checkpoints at or after DATE (git's forms).")
@click.option("--until", "--before", "until", metavar="DATE", help="Only checkpoints at or before DATE.")
@click.option("--grep", metavar="PATTERN", help="Only checkpoints whose commit message matches PATTERN (regex).")
@click.option("-S", "pickaxe_string", metavar="STRING",
              help="Only checkpoints that change how often STRING occurs in a field's value.")
@click.option("-G", "pickaxe_regex", metavar="REGEX",
              help="Only checkpoints that add or remove a line matching REGEX in a field's value.")
@click.option("--pickaxe-regex", "string_is_regex", is_flag=True, help="Read -S's STRING as a regular expression.")
@click.option("-p", "--patch", is_flag=True, help="Each checkpoint's field diff against its parent.")
@click.option("--stat", is_flag=True, help="Each checkpoint's per-field change counts.")
@click.option("--name-only", is_flag=True, help="The fields each checkpoint changed.")
@click.option("--name-status", is_flag=True, help="The fields each checkpoint changed, with A, M or D.")
@click.option("--decorate", type=click.Choice(["short", "full", "auto", "no"]), metavar="[=short|full|auto|no]",
              help="Thread names, HEAD and tags next to checkpoints (default: short).")
@click.option("--no-decorate", is_flag=True, help="No thread names, HEAD or tags next to checkpoints.")
@click.option("--format", "--pretty", "fmt", metavar="FORMAT", help="Each checkpoint as FORMAT (placeholders below).")
@click.option("--raw", is_flag=True,
              help="Name and diff the stored fields (Changed, -p, --stat, --name-only, -- FIELD), not as their "
                   "viewer shows them.")
@click.option("--show-signature", is_flag=True,
              help="Each checkpoint's signature state: verified (by whom), unsigned, bad, unknown key.")
def log(names: tuple[str, ...], limit: int | None, oneline: bool, graph: bool, all_: bool, first_parent: bool,
        order: str | None, as_json: bool, follow: bool, reverse: bool, since: str | None, until: str | None,
        grep: str | None, pickaxe_string: str | None, pickaxe_regex: str | None, string_is_regex: bool,
        patch: bool, stat: bool, name_only: bool, name_status: bool, decorate: str | None, no_decorate: bool,
        fmt: str | None, raw: bool, show_signature: bool) -> None:
    """Show checkpoints, newest first (default: the current thread).

    A REVISION is a thread or a checkpoint; one is followed back through forks along its line.
    As in git: ^A leaves out what A reaches, A..B is ^A B (A.. and ..B: HEAD for the missing
    side), A...B is what either reaches and not both. After --, field names: only the
    checkpoints that changed one of them (and, with -p, only their diffs).

    With --follow REVISION is a thread (it may not exist yet): its log oldest first, then each new
    checkpoint as other processes write it, and resets, forks and deletions as lines of their
    own, until interrupted (--json: one object per line, each with a "kind").

    \b
    FORMAT placeholders: %H %h commit, %P %p parents, %s subject, %b body, %B message,
    %at %ai %aI %ad %ar time, %d %D decorations, %n newline, %% percent, %xNN a byte,
    %(id) %(shortid) %(thread) %(step) %(source) %(status) %(changed) %(nchanged) %(superseded).

    \b
    Example:
      qvc log --oneline -20 run-7
      qvc log run-7~10..run-7 --reverse -p -- messages
      qvc log --since "last week" -S "rate limit" --name-status
      qvc log --all --graph
      qvc log --follow --oneline run-7
    """
    # deferred: start-up speed
    from qvc.readers.log import check_format, revision_set
    from qvc.readers.log import graph as draw
    from qvc.readers.log import log as walk

    fields = click.get_current_context().meta.get("after_dashes", [])
    searching = pickaxe_string is not None or pickaxe_regex is not None
    selecting = bool(reverse or grep or fields or patch or stat or searching or name_only or name_status)
    if graph and (as_json or selecting):
        raise click.UsageError("--graph goes with revisions, -n, --all, --first-parent, --since, --until, "
                               "--topo-order, --date-order, --decorate and --format only")
    if name_only and name_status:
        raise click.UsageError("--name-only and --name-status cannot be used together")
    if string_is_regex and pickaxe_string is None:
        raise click.UsageError("--pickaxe-regex goes with -S")
    if fmt is not None:
        fmt = check_format(fmt)
    if show_signature and (graph or follow):
        raise click.UsageError("--show-signature does not go with --graph or --follow")
    decorate = "no" if no_decorate else decorate or "short"
    if decorate == "auto":  # git's default: names on a terminal only
        decorate = "short" if sys.stdout.isatty() else "no"
    store = session().store()
    if follow:
        if graph or all_ or selecting or since or until or first_parent or order or len(names) > 1:
            raise click.UsageError("--follow takes one thread and -n, --oneline, --format, --raw or --json")
        from qvc.cli.following import follow_log  # deferred: start-up speed (json, datetime)

        return follow_log(store, names[0] if names else None, limit, as_json,
                          lambda e, head: entry_lines(e, head, oneline, fmt, decorate),
                          compact=oneline or fmt is not None, raw=raw)
    head = store.current_or_none() or Head(None, None)  # a garbled HEAD: naming a thread still works
    if all_:
        warn_damaged(store)  # the threads --all cannot show, one line each
    if names:
        start, exclude = revision_set(store, names, names=lambda text: run_names(store, text))
    else:
        start, exclude = ([] if all_ else [revision(store, None).commit]), []
    after, before = date(since, "--since"), date(until, "--until")
    if graph:
        def line(e) -> str:  # the line --oneline prints: the same counts, names and short ids
            return entry_lines(next(number_entries(store, [e])), head, True, None, decorate)[0]

        text = draw(store, start, limit=limit, all=all_, color=session().color, exclude=exclude,
                    first_parent=first_parent, order=order, since=after, until=before, decorate=decorate,
                    fmt=fmt, head_thread=head.thread, head_commit=head.commit, viewed=not raw, line=line)
        page(text.rstrip("\n").split("\n") if text else [])
        return
    where = None
    if searching:
        from qvc.readers.pickaxe import pickaxe  # deferred: start-up speed

        where = pickaxe(store, string=pickaxe_string, regex=pickaxe_regex, string_is_regex=string_is_regex,
                        fields=fields)
    entries = walk(store, start, limit=limit, all=all_, exclude=exclude, fields=fields, since=after, until=before,
                   grep=grep, reverse=reverse, first_parent=first_parent, order=order, where=where, viewed=not raw)
    entries = number_entries(store, entries)  # a run's checkpoints as RUN@N, as `timeline` and `show` name them
    signatures = None
    if show_signature:
        from qvc.readers.signatures import signature_reader  # deferred: start-up speed

        signatures = signature_reader(store)
    if as_json:
        emit_json([entry_json(store, e, fields, patch or stat, raw=raw, signatures=signatures) for e in entries])
        return
    lines = []
    for e in entries:
        block = entry_lines(e, head, oneline, fmt, decorate)
        if signatures is not None:
            signed = signature_line(store, e.commit, signatures) or "unsigned"
            if oneline:
                block[0] += f" · {signed}"
            else:
                block.insert(1 if fmt is not None else len(block) - 1, f"Signed:  {signed}")
        if name_only or name_status:
            names_of = [f"{e.kinds.get(f, 'M')}\t{qname(f)}" if name_status else qname(f) for f in sorted(e.changed)]
            if fmt is not None:
                block += [""] + names_of
            elif oneline:
                block += names_of
            else:
                block = block[:-1] + names_of + [""]
        lines += block
        if patch or stat:
            lines += entry_diff(store, e, fields, patch, stat, raw=raw)
    page(lines[:-1] if lines and lines[-1] == "" else lines, keep="\t" if name_status else "")


def signature_line(store, commit: str, reader=None) -> str | None:
    """How ``qvc show`` and ``qvc log --show-signature`` say a commit's signature state
    (``None``: an unsigned commit of a repository without allowed signers)."""
    if reader is None:
        from qvc.readers.signatures import signature_reader  # deferred: start-up speed

        reader = signature_reader(store)
    state = reader(commit)
    if state is None:
        return None
    if state["status"] == "verified":
        return style(f"verified: {state['principal']} ({state['fingerprint']})", fg="green")
    return style(f"{state['status'].upper()}: {state['reason']}", fg="red")


def date(text: str | None, option: str) -> float | None:
    """A ``--since`` / ``--until`` value as a Unix time (git's date forms, :mod:`qvc.readers.dates`)."""
    from qvc.readers.dates import parse_date  # deferred: start-up speed

    if text is None:
        return None
    try:
        return parse_date(text)
    except InvalidInputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def entry_diffs(store, e, fields, *, plain: bool = False, raw: bool = False) -> list:
    """The field diffs of a log entry against its parent (only ``fields`` when given), as the
    checkpoints' viewers show them (plain data with ``plain``, for ``--json``; stored with ``raw``)."""
    from qvc.readers.views import diff_commits  # deferred: start-up speed

    diffs = diff_commits(store, None, e.commit, plain=plain, raw=raw)
    if not plain:  # the text forms, as people read them: a run's storage records left out
        from qvc.readers.views import people_diffs  # deferred: start-up speed

        diffs = people_diffs(store, diffs, [e.commit, e.parents[0] if e.parents else None], fields)
    return [d for d in diffs if d.field in fields] if fields else diffs


def entry_json(store, e, fields, with_diff: bool, *, raw: bool = False, signatures=None) -> dict:
    """A log entry's ``--json`` form; with -p or --stat, its ``"diff"`` (as ``qvc diff --json``);
    with ``signatures`` (--show-signature), its ``"signature"`` (as ``qvc show --json``)."""
    data = e.to_json()
    if signatures is not None:
        data["signature"] = signatures(e.commit)
    if with_diff:
        from qvc.readers.statediff import to_json  # deferred: start-up speed

        data["diff"] = to_json(entry_diffs(store, e, fields, plain=True, raw=raw))
    return data


def entry_diff(store, e, fields, patch: bool, stat: bool, *, raw: bool = False) -> list[str]:
    """The --stat and -p lines printed under a log entry, then a blank line."""
    from qvc.readers.statediff import format_diff, format_stat  # deferred: start-up speed

    diffs = entry_diffs(store, e, fields, raw=raw)
    lines: list[str] = []
    if stat:
        lines += format_stat(diffs).split("\n")
    if patch:
        text = format_diff(diffs, color=session().color, width=value_width())
        if text:
            lines += ([""] if stat else []) + text.split("\n")
    return lines + [""]


def decorations(entry, head, decorate: str = "short") -> str:
    """`` (HEAD -> t, tag: v1, other, superseded)``: the names pointing at a log entry, as git
    decorates (``decorate``: ``short``, ``full`` ref names, or ``no``)."""
    from qvc.readers.log import decorations as names  # deferred: start-up speed

    if decorate == "no":
        return ""
    found = names(quoted_names(entry), None if head.thread is None else qname(head.thread), head.commit,
                  full=decorate == "full")
    return f" ({', '.join(found)})" if found else ""


def quoted_names(entry):
    """``entry`` with its thread, heads and tags as every view shows names (:func:`qname`): an
    escape sequence or a bidi override in a name is shown escaped, not obeyed by the terminal
    (nor dropped with the colours), and a newline in one does not split its row."""
    return replace(entry, thread=None if entry.thread is None else qname(entry.thread),
                   heads=[qname(t) for t in entry.heads], tags=[qname(t) for t in entry.tags])


def changed_count(e) -> str:
    """``2 changed``: how many fields a log entry changed as people see them; when its commit
    message (what git shows) counts more stored fields (bookkeeping a viewer hides), that count
    too: ``1 changed (2 in git)``."""
    return f"{len(e.changed)} changed" + (f" ({e.stored} in git)" if e.stored is not None else "")


def entry_lines(e, head, oneline: bool, fmt: str | None = None, decorate: str = "short") -> list[str]:
    """One log entry as text: ``fmt`` (--format) expanded, one line with --oneline, else a block
    ending in a blank line."""
    if fmt is not None:
        from qvc.readers.log import format_entry  # deferred: start-up speed

        return format_entry(quoted_names(e), fmt, head_thread=None if head.thread is None else qname(head.thread),
                            head_commit=head.commit, store=session().opened).split("\n")
    status = f" [{e.status}]" if e.status else ""
    names = decorations(e, head, decorate)
    if oneline:
        return [f"{style(e.commit[:7], fg='yellow')} {short(e.checkpoint_id)} "
                f"{shown_name(e.name, e.n) if e.name else f'step {e.step}'} · "
                f"{e.source or 'put'} · {changed_count(e)}{status}{' · earlier removed' if e.cut else ''}"
                f"{style(names, fg='cyan')}"]
    number = f"Run: {shown_name(e.name, e.n)}" if e.name else f"Step: {e.step}"
    return [style(f"checkpoint {e.checkpoint_id}", fg="yellow") + style(names, fg="cyan"),
            f"Commit:  {e.commit[:12]}   Thread: {qname(e.thread)}   {number}   "
            f"Source: {e.source or 'put'}{'   Status: ' + e.status if e.status else ''}",
            f"Date:    {ago(e.time)} ({local_date(e.time)})",
            f"Changed: {', '.join(e.changed) if e.changed else '(nothing)'}",
            *([f"Cut:     {e.cut}"] if e.cut else []), ""]


@cli.command()
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("--field", "fields", multiple=True, metavar="NAME", help="Show only this state field (repeatable).")
@click.option("--full", is_flag=True, help="Do not shorten long strings and lists.")
@click.option("--json", "as_json", is_flag=True, help="The exact data (lossless tagged JSON).")
@click.option("--raw", is_flag=True, help="The stored fields, not as their viewer shows them.")
def show(name: str | None, fields: tuple[str, ...], full: bool, as_json: bool, raw: bool) -> None:
    """Show a checkpoint: header, metadata, state and pending writes (default: HEAD).

    The state is shown as its writer's viewer shows it (LangGraph messages and runs as
    conversations, one message per line; a run's storage bookkeeping hidden); --raw shows the
    stored fields.

    \b
    Example:
      qvc show run-7~2 --field messages --full
      qvc show 3f2a9c --json
    """
    # deferred: start-up speed
    from qvc.readers.statediff import is_conversation, message_line, shorten
    from qvc.readers.views import checkpoint_json, for_people, shown_metadata, shown_writes, state_of
    from qvc.store.revisions import parse_revision

    store = session().store()
    try:  # RUN@N is the run as it was (show_run), not only its checkpoint
        rev = parse_revision(store, "HEAD" if name is None else name)
    except NotFoundError:
        if name is None:
            raise
        if ":" in name and names_checkpoint(store, name.split(":", 1)[0]):  # git's REV:PATH (RUN@N:FIELD too)
            return show_field(store, *name.split(":", 1), as_json)
        if raw:  # the stored fields of the checkpoint a run's name names (RUN@N, as every command takes it)
            rev = revision(store, name)
        elif show_run(store, name, full, as_json, fields):
            return
        else:
            raise
    about = store.commit_info(rev.commit)
    number = run_number(store, about.thread_id, about.checkpoint_id)  # RUN@N for a run's checkpoint
    if as_json:
        data = checkpoint_json(store, rev.commit, fields, raw=raw)
        emit_json({**data, "n": number[0], "name": number[1]} if number else data)
        return
    damaged: dict[str, str] = {}  # fields whose blob does not read: marked, the others shown
    tup = store.read(rev.commit, damaged=damaged)
    info = store.commit_info(rev.commit)
    cp = tup.checkpoint
    state = state_of(store, rev.commit, cp.state_data, raw=raw) if not damaged else cp.state_data
    for f in fields:
        if f in damaged:
            raise CorruptionError(damaged[f])
        if f not in state:
            raise NotFoundError(f"checkpoint {short(cp.id)} has no field {f!r} (fields: {', '.join(state) or 'none'})")
    shown = {f: state[f] for f in fields} if fields else for_people(store, rev.commit, state, raw=raw)
    parent = tup.parent_config
    width = value_width()
    lines = [style(f"checkpoint {cp.id}", fg="yellow"),
             f"Commit:   {rev.commit}",
             f"Thread:   {qname(cp.thread_id)}   "
             + (f"Run: {shown_name(number[1], number[0])}" if number else f"Step: {cp.step}"),
             f"Parent:   {qname(parent.thread_id)}@{parent.checkpoint_id}" if parent else "Parent:   (none)",
             f"Date:     {ago(info.time)} ({local_date(info.time)})"]
    signed = signature_line(store, rev.commit)
    if signed is not None:
        lines.append(f"Signed:   {signed}")
    metadata = shown_metadata(store, rev.commit, tup.metadata, raw=raw)
    if metadata:
        lines.append(style("Metadata:", bold=True))
        lines += [f"  {k}: {shorten(v, full, width, key=k)}" for k, v in metadata.items()]
    count = len(for_people(store, rev.commit, state, raw=raw)) + len(damaged)
    lines.append(style(f"State ({count} field{'s' if count != 1 else ''}):", bold=True))
    lines += [f"  {style(f, fg='red')}: DAMAGED ({why}; see `qvc fsck`)" for f, why in damaged.items() if not fields]
    for f, v in shown.items():
        version = cp.state_versions.get(f)
        label = f"  {style(f, fg='green')}{f' (v{version})' if version else ''}"
        if is_conversation(v):  # a conversation: one message per line
            lines.append(f"{label}: {len(v)} message{'' if len(v) == 1 else 's'}")
            lines += [f"    {i:>3} {message_line(m, full=full, width=max(40, width - 8))}" for i, m in enumerate(v)]
        else:
            lines.append(f"{label}: {shorten(v, full, width, key=f)}")
    writes = shown_writes(store, rev.commit, cp.state_data, state, raw=raw)
    lines.append(style(f"Pending writes ({len(writes)}):", bold=True) if writes else "Pending writes: none")
    lines += [f"  {w.task_id} {w.channel}: {shorten(w.value, full, width)}" for w in writes]
    page(lines)


def names_checkpoint(store, name: str) -> bool:
    """Whether ``name`` names a checkpoint (a run's ``RUN@N`` included)."""
    if not name:
        return True  # `:FIELD`, HEAD's, as git's `:PATH`
    try:
        revision(store, name)
    except (NotFoundError, InvalidInputError):
        return False
    return True


def show_field(store, name: str, field: str, as_json: bool) -> None:
    """``qvc show REV:FIELD``: the stored field's value alone, as git's ``show REV:PATH`` prints a
    file: the text of its field file (``qvc checkout --to``), or its tagged JSON with ``--json``."""
    # deferred: start-up speed
    from qvc.codec.tagged import to_jsonable
    from qvc.readers.statefiles import field_text

    commit = revision(store, name or "HEAD").commit
    try:
        value = store.field_value(commit, field)
    except NotFoundError:
        damaged: dict[str, str] = {}
        fields = sorted([*store.read(commit, damaged=damaged).checkpoint.state_data, *damaged])
        raise NotFoundError(f"checkpoint {name or 'HEAD'} has no field {field!r} "
                            f"(fields: {', '.join(fields) or 'none'})") from None
    if as_json:
        emit_json(to_jsonable(value, field))
    else:
        page(field_text(value, field).rstrip("\n").split("\n"))


@cli.command()
@click.argument("field")
@click.argument("name", required=False, shell_complete=complete_names)
@click.option("--full", is_flag=True, help="Do not shorten long values.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array: path, id, commit, step, time, value.")
@click.option("--raw", is_flag=True, help="Blame the stored field, not as its viewer shows it.")
def blame(field: str, name: str | None, full: bool, as_json: bool, raw: bool) -> None:
    """Show which checkpoint each part of FIELD comes from (default: at HEAD).

    A list field: each item with the checkpoint that added it (a conversation: each message,
    told apart by its id); a mapping: each key with the checkpoint that gave it its value;
    anything else: the checkpoint of its last change. FIELD is as `qvc show` shows it (a run's
    `messages`, LangGraph messages by role and content); --raw blames the stored field.

    \b
    Example:
      qvc blame messages run-7
      qvc blame scratch run-7~3 --json
    """
    # deferred: start-up speed
    from qvc.readers.blame import blame as attribute
    from qvc.readers.statediff import format_path, is_message, message_line, shorten

    store = session().store()
    lines = attribute(store, field, revision(store, name).commit, raw=raw)
    if as_json:
        emit_json([b.to_json() for b in lines])
        return
    width = value_width()
    ids = {b.checkpoint_id: short(b.checkpoint_id, store) for b in lines}
    pad = max((len(i) for i in ids.values()), default=12)
    rows = []
    for b in lines:
        where = format_path(field, b.path)
        head = (f"{style(b.commit[:7], fg='yellow')} {ids[b.checkpoint_id]:<{pad}} step {str(b.step):<4} "
                f"{local_date(b.time)}  ")
        room = max(40, width - len(where) - 50)
        text = f" {message_line(b.value, full=full, width=room)}" if is_message(b.value) and len(b.path) == 1 \
            else f": {shorten(b.value, full, room)}"
        rows.append(f"{head}{where}{text}")
    page(rows)
