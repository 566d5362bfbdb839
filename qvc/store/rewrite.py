"""History rewrites: the one place where checkpoint commits are copied with new parents or a new thread.

Deleting a checkpoint (re-parenting its descendants), deleting the checkpoints of some runs,
pruning a thread to its latest checkpoint, and copying or renaming a thread all rewrite commits.
They do it through a :class:`Rewriter`, inside the caller's transaction:

1. the caller plans what to rewrite (reads only), then marks the transaction as rewriting
   history (:meth:`~qvc.plumbing.transaction.Transaction.rewrite_history`: a new
   ``qvc/generation`` token when it ends, so every process drops what it derived from history);
2. it writes the copies (:meth:`Rewriter.commit`, :meth:`Rewriter.line`, :meth:`Rewriter.relabel`,
   :meth:`Rewriter.drop`) and moves its refs.

Every rewrite is recorded (:class:`RewriteLog`): a commit on ``refs/qvc/rewrites``, signed as
every commit the store writes, saying why, by whom, when, which refs moved and which checkpoints
left history (by id and commit SHA), so ``qvc verify`` tells an erasure that was asked for from
tampering.

Caches follow by themselves, as listeners of the repository: the durable checkpoint-id index is
retired when the transaction is marked, before any ref moves (a rewriter killed before its token
is written leaves an index that is rebuilt, never one naming a deleted checkpoint), and
:meth:`qvc.store.history.History.observe` sees the rewriting record and drops what it holds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from qvc.errors import CorruptionError, QvcError
from qvc.plumbing.objects import MODE_BLOB, commit_bytes, tree_bytes
from qvc.store.format import HEADER, decode_header, encode_header, escape_trailer
from qvc.store.history import History
from qvc.store.refnames import (
    HEADS,
    REMOTE_QVC,
    REWRITES,
    SUPERSEDED,
    decode_thread,
    head_ref,
    superseded_prefix,
    writes_ref,
)
from qvc.store.writes import keyed_prefix

if TYPE_CHECKING:
    from qvc.plumbing.repository import Repository, Transaction


class Rewriter:
    """Copies of commits with new parents or a new thread, written into a caller's transaction."""

    def __init__(self, repo: Repository, history: History):
        self._repo = repo
        self._history = history

    def commit(self, tx: Transaction, sha: str, parents: Sequence[str], *, thread: str | None = None,
               header_update: Mapping[str, Any] | None = None, note: str | None = None) -> str:
        """Write into ``tx`` a copy of commit ``sha`` with ``parents`` instead of its own; return its SHA.

        Everything else (tree, message, author, times) is kept, so an unchanged copy has the
        same SHA, but not a signature: the copy is signed by this store's key, or unsigned. With
        ``thread``, the copy is relabelled as a checkpoint of that thread (its header's
        ``thread_id``, its versions record re-based on the new first parent, and its ``Thread``
        trailer). ``header_update`` updates the checkpoint header; ``note`` is a line added to the
        message's trailers. Moves no ref. Raises :class:`CorruptionError` if the commit (or, to
        change it, its checkpoint header) does not read.
        """
        from qvc.plumbing.signing import split_signature  # deferred: start-up speed (rewrites are rare)

        data = split_signature(self._repo.read(bytes.fromhex(sha), "commit"))[0]  # a copy is signed anew, or not
        head, _, message = data.partition(b"\n\n")
        lines = [ln for ln in head.split(b"\n") if not ln.startswith(b"parent ")]
        if thread is not None or header_update:
            info = self._history.commit(sha)
            entries = dict(self._history.entries(info))
            if HEADER not in entries:
                raise CorruptionError(f"commit {sha[:12]} is not a qvc checkpoint (no {HEADER} entry)")
            header, metadata = decode_header(self._history.blob(entries[HEADER][1]), f"checkpoint {sha[:12]}")
            old = header.get("thread_id")
            if thread is not None:
                header["thread_id"] = thread
                if isinstance(header.get("versions"), list) and header["versions"]:
                    header["versions"] = [parents[0] if parents else None, header["versions"][1]]
            header.update(header_update or {})
            entries[HEADER] = (MODE_BLOB, tx.write("blob", encode_header(header, metadata)))
            lines[0] = b"tree " + tx.write("tree", tree_bytes(entries)).hex().encode()
            if thread is not None and isinstance(old, str):
                message = message.replace(f"\nThread: {escape_trailer(old)}\n".encode(),
                                          f"\nThread: {escape_trailer(thread)}\n".encode())
        if note is not None:
            message = message.rstrip(b"\n") + b"\n" + note.encode() + b"\n"
        lines[1:1] = [b"parent " + p.encode() for p in parents]
        return tx.write("commit", b"\n".join(lines) + b"\n\n" + message).hex()

    def line(self, tx: Transaction, tip: str, mapping: dict[str, str | None]) -> str | None:
        """The new tip of the first-parent line ending at ``tip`` once the commits ``mapping``
        names are replaced (``mapping[c]``: the commit that takes ``c``'s place, ``None``: gone).
        Commits between ``tip`` and the first mapped one are re-parented and added to
        ``mapping``; a line reaching no mapped commit is unchanged (its commits map to themselves)."""
        path, current = [], tip
        while current is not None and current not in mapping:
            path.append(current)
            current = self._history.commit(current).parent
        if current is None:
            for c in path:
                mapping[c] = c  # unaffected: remember so other refs stop here
            return tip
        new_parent = mapping[current]
        for c in reversed(path):
            parents = ([new_parent] if new_parent else []) + list(self._history.commit(c).parents[1:])
            new_parent = mapping[c] = self.commit(tx, c, parents)
        return mapping[tip]

    def relabel(self, tx: Transaction, tip: str, old: str, new: str, mapping: dict[str, str]) -> None:
        """Copy the first-parent run of thread ``old``'s own checkpoints ending at ``tip`` as
        checkpoints of thread ``new``, adding ``{old sha: new sha}`` to ``mapping`` (commits
        already in it are shared)."""
        chain = []
        for info in self._history.first_parents(tip):
            if info.hex in mapping or info.thread_id != old:
                break
            chain.append(info)
        for info in reversed(chain):
            parents = [mapping.get(p, p) for p in info.parents]
            mapping[info.hex] = self.commit(tx, info.hex, parents, thread=new)

    def drop(self, tx: Transaction, tips: Sequence[str], drop: set[str], *,
             relabel: Callable[[str], tuple[str, Mapping[str, Any]]] | None = None,
             cut: Callable[[str, list[str], list[str]], tuple[Mapping[str, Any], str | None]] | None = None,
             mapped: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
        """Rewrite the history reachable from ``tips`` (every parent, not only the first) without
        the commits in ``drop``: a dropped commit's children get its parents instead. Returns,
        for each tip, the commits that take its place (``[]``: nothing left; several: a dropped
        tip with several parents). Commits with unchanged parents keep their SHA unless
        ``relabel`` (``sha -> (thread, header update)``) gives every copy a new thread. A commit
        whose first parent was dropped gets ``cut(sha, new parents, the commits they copy)``'s
        ``(header update, note)`` (:meth:`commit`). ``mapped``, if given, receives what every
        commit walked became."""
        order: list[str] = []  # parents before children
        seen: set[str] = set()
        stack: list[tuple[str, bool]] = [(t, False) for t in reversed(tips)]
        while stack:
            hexid, done = stack.pop()
            if done:
                order.append(hexid)
                continue
            if hexid in seen:
                continue
            seen.add(hexid)
            stack.append((hexid, True))
            stack.extend((p, False) for p in self._history.commit(hexid).parents if p not in seen)
        mapped = {} if mapped is None else mapped
        origin: dict[str, str] = {}  # copy -> what it copies
        for hexid in order:
            info = self._history.commit(hexid)
            parents = list(dict.fromkeys(q for p in info.parents for q in mapped[p]))
            if hexid in drop:
                mapped[hexid] = parents
            elif parents == list(info.parents) and relabel is None:
                mapped[hexid] = [hexid]
            elif relabel is not None:
                thread, update = relabel(hexid)
                mapped[hexid] = [self.commit(tx, hexid, parents, thread=thread, header_update=update)]
            elif cut is not None and info.parents and info.parents[0] in drop:
                update, note = cut(hexid, parents, [origin.get(p, p) for p in parents])
                mapped[hexid] = [self.commit(tx, hexid, parents, header_update=update, note=note)]
            else:
                mapped[hexid] = [self.commit(tx, hexid, parents)]
            if mapped[hexid] != [hexid] and hexid not in drop:
                origin[mapped[hexid][0]] = hexid
        return {t: mapped[t] for t in tips}

    def thread_refs(self, tx: Transaction, thread: str) -> tuple[list[tuple[str, str]], dict[str, str]]:
        """What makes up ``thread`` as ``tx`` sees it (this transaction's moves included): its head
        and superseded lines, ``[(ref, tip)]``, and ``{ref: tip}`` of the pending writes of its own
        checkpoints on them (by commit, and keyed by the thread). A damaged line's refs are there
        with the writes of whatever part of it reads."""
        own = [(head_ref(thread), tx.ref(head_ref(thread)))] + tx.refs(superseded_prefix(thread))
        own = [(n, t) for n, t in own if t is not None]
        writes: dict[str, str] = {}  # a head and its superseded lines share commits
        for _, tip in own:
            try:
                for info in self._history.first_parents(tip):
                    if info.thread_id != thread:
                        break
                    wtip = tx.ref(writes_ref(info.hex))
                    if wtip is not None:
                        writes[writes_ref(info.hex)] = wtip
            except CorruptionError:
                continue
        writes.update(tx.refs(keyed_prefix(thread)))
        return own, writes

    def settle(self, tx: Transaction, thread: str, head: str, superseded: Sequence[tuple[str, str]],
               drop: set[str], *, keep: str | None = None, target: str | None = None,
               relabel: Callable[[str], tuple[str, Mapping[str, Any]]] | None = None,
               cut: Callable[[str, list[str], list[str]], tuple[Mapping[str, Any], str | None]] | None = None,
               mapped: dict[str, list[str]] | None = None) -> str | None:
        """Rewrite a thread's lines (``head`` and its ``superseded`` refs, ``(name, tip)`` each) without
        the commits in ``drop`` (see :meth:`drop`) and move its refs: the head becomes what takes the
        old head's place (the one whose checkpoint id is ``keep``, else the newest by id, if several;
        a line of the superseded ones if nothing is left of the head's), every other tip left a
        superseded line. With ``target`` the result becomes that thread's refs instead (a copy: the
        source's refs stay; ``relabel`` then names the copies' thread). ``cut`` and ``mapped`` are
        :meth:`drop`'s. Returns the new head."""
        tips = [head, *(tip for _, tip in superseded)]
        result = self.drop(tx, tips, drop, relabel=relabel, cut=cut, mapped=mapped)

        def cid(sha: str) -> str:
            return self._history.commit(sha).checkpoint_id

        pool = list(dict.fromkeys(result[head]))
        others = list(dict.fromkeys(t for _, tip in superseded for t in result[tip]))
        if not pool and others:
            pool = [max(others, key=cid)]
        main = next((t for t in pool if cid(t) == keep), None) or (max(pool, key=cid) if pool else None)
        rest = [t for t in dict.fromkeys(pool + others) if t != main]
        owner = target or thread
        if target is None:
            if main != head:
                tx.move_ref(head_ref(thread), head, main, "rewrite")
            for name, tip in superseded:
                if tip in rest:
                    rest.remove(tip)  # unchanged: its ref stays
                else:
                    tx.move_ref(name, tip, None)
        elif main is not None:
            tx.move_ref(head_ref(target), None, main, "copy")
        for tip in rest:
            tx.move_ref(superseded_prefix(owner) + tip, None, tip)
        return main


#: the file of a rewrite record's tree
RECORD = "rewrite.json"
#: the namespace of rewrite logs under ``refs/qvc/`` (and under a remote's tracking refs)
ROLE = "rewrites"


class RewriteLog:
    """The record of history rewrites: a commit on this repository's chain under
    :data:`~qvc.store.refnames.REWRITES` per transaction that rewrote history
    (:meth:`~qvc.plumbing.transaction.Transaction.rewrite_history`), written in that
    transaction, so the rewrite and its record commit together or not at all.

    Its tree holds :data:`RECORD`, JSON: ``{"version": 1, "time", "why", "by" (the reflog
    identity), "signer" (the signing key's fingerprint, or null), "moves": [[ref, old, new]],
    "removed": [{"sha", "checkpoint_id", "thread"}], "rewritten": [{"sha", "checkpoint_id",
    "thread", "new"}]}``: the checkpoints of the moved threads' lines that no new value of the
    rewrite reaches, gone or replaced by a copy with the same id. The record names commits by SHA
    only (it does not keep them: ``qvc gc --prune`` erases their data).
    """

    def __init__(self, repo, history: History):
        self._repo = repo
        self._history = history
        repo.commit_listeners.append(self.note)

    def note(self, tx: Transaction) -> None:
        """Write the record of ``tx`` if it rewrote history (a commit listener)."""
        if not tx.rewrites:
            return
        moves = [[name, old, new] for name, old, new in tx.record.refs if not name.startswith(REWRITES)]
        self._write(tx, "; ".join(tx.why) or "rewrite", moves, *self._left(moves))

    def record(self, why: str) -> None:
        """Record, in a transaction of its own, an erasure that moves no ref (``qvc gc --prune``:
        the reflogs and the data of what was deleted)."""
        with self._repo.transaction() as tx:
            self._write(tx, why, [], [], [])

    def _write(self, tx: Transaction, why: str, moves: list, removed: list[dict], rewritten: list[dict]) -> None:
        ref = REWRITES + self._repo.id  # this repository's own chain (replicas never write each other's)
        record = {"version": 1, "time": int(time.time()), "why": why, "by": self._repo.staging.who,
                  "signer": self._repo.signer.fingerprint if self._repo.signer is not None else None,
                  "moves": moves, "removed": removed, "rewritten": rewritten}
        import json  # (loaded on first use, as in records(): a read that follows no rewrite needs none)

        blob = tx.write("blob", json.dumps(record, indent=1, sort_keys=True).encode() + b"\n")
        tree = tx.write("tree", tree_bytes({RECORD: (MODE_BLOB, blob)}))
        tip = tx.ref(ref)
        message = (f"rewrite: {why}\n\n{len(removed)} checkpoint(s) removed, {len(rewritten)} "
                   f"rewritten, {len(moves)} ref(s) moved\n")
        commit = tx.write("commit", commit_bytes(tree.hex(), [tip] if tip else [], message)).hex()
        tx.move_ref(ref, tip, commit)

    def records(self) -> Iterator[tuple[str, dict]]:
        """``(commit SHA, record)`` of every rewrite recorded, this repository's and those of the
        repositories it fetched from or was cloned from (every chain under ``refs/qvc/rewrites/``
        and their remote-tracking copies), each chain newest first. Raises
        :class:`~qvc.errors.CorruptionError` for a record that does not read."""
        import json

        tips = dict.fromkeys(tip for _, tip in self._repo.refs(REWRITES))
        tips.update(dict.fromkeys(tip for name, tip in self._repo.refs(REMOTE_QVC) if f"/{ROLE}/" in name))
        seen: set[str] = set()
        for tip in tips:
            sha: str | None = tip
            while sha is not None and sha not in seen:
                seen.add(sha)
                info = self._history.commit(sha)
                entries = dict(self._history.entries(info))
                if RECORD not in entries:
                    raise CorruptionError(f"rewrite record {sha[:12]} has no {RECORD}")
                try:
                    yield sha, json.loads(self._history.blob(entries[RECORD][1]))
                except ValueError as exc:
                    raise CorruptionError(f"rewrite record {sha[:12]}: {exc}") from None
                sha = info.parent

    def _left(self, moves: list) -> tuple[list[dict], list[dict]]:
        """The checkpoints of the moved threads' lines that the old values reach and the new do
        not: ``(removed, rewritten)``, the second those whose id a new value still reaches (a
        copy, re-parented or relabelled: ``"new"`` is its SHA)."""
        kept: dict[str, str] = {}  # checkpoint id -> SHA, of what the new values reach
        for name, _, new in moves:
            if new is not None:
                for sha in list(self._own(name, new, set(kept.values()))):
                    kept.setdefault(self._history.commit(sha).checkpoint_id, sha)
        removed: list[dict] = []
        rewritten: list[dict] = []
        done = set(kept.values())
        for name, old, _ in moves:
            if old is None:
                continue
            for sha in self._own(name, old, done):
                done.add(sha)
                info = self._history.commit(sha)
                entry = {"sha": sha, "checkpoint_id": info.checkpoint_id, "thread": info.thread_id}
                if info.checkpoint_id in kept:
                    rewritten.append({**entry, "new": kept[info.checkpoint_id]})
                else:
                    removed.append(entry)
        return removed, rewritten

    def _own(self, name: str, tip: str, stop: set[str]) -> Iterator[str]:
        """The commits of the thread ref ``name`` names (a head or a superseded line) from ``tip``
        back to where its line leaves the thread (a fork's source) or meets ``stop``; nothing for
        other refs (pending writes, tags)."""
        if not name.startswith((HEADS, SUPERSEDED)):
            return
        stack, seen = [tip], set()
        while stack:
            sha = stack.pop()
            if sha in seen or sha in stop:
                continue
            seen.add(sha)
            try:
                info = self._history.commit(sha)
            except QvcError:
                continue  # a damaged commit: the record names what it can read
            if info.thread_id is not None and _thread_of(name) not in (info.thread_id, None):
                continue  # another thread's checkpoint (where a fork started): not this line's
            yield sha
            stack.extend(info.parents)


def _thread_of(name: str) -> str | None:
    """The thread id a head or superseded ref name stands for, as far as the name tells (``None``
    for a hashed long id: then every checkpoint of the line counts)."""
    if name.startswith(HEADS):
        return decode_thread(name[len(HEADS):])
    return decode_thread(name[len(SUPERSEDED):].rpartition("/")[0])

