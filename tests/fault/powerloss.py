"""Simulated power loss from a real system-call record (in the spirit of ALICE and CrashMonkey).

:func:`parse` turns an ``strace -f -ttt -y -xx`` log of a writer into the file-system operations
it made under one directory: creates, writes (with their bytes and offsets), truncates, renames,
links, unlinks, mkdirs, and the barriers ``fsync``/``fdatasync``/``syncfs``/``sync``, plus the
writer's marker writes to a file outside that directory. :class:`Trace` then builds the states
a power cut after operation ``p`` could leave on disk:

- an operation covered by a barrier that completed before ``p`` is always there: ``fsync`` or
  ``fdatasync`` of a file persists the data written to it before the call started, ``fsync`` of
  a directory persists its entries, ``syncfs``/``sync`` persist everything;
- directory operations (create, rename, link, unlink, mkdir) reach the disk in order, so the
  un-synced ones that survive are a prefix (journalled file systems order metadata);
- un-synced data writes are independent of each other and of the metadata: each one is kept,
  dropped, or kept up to an arbitrary byte (data=writeback: a renamed file may come back empty
  or torn, a gap reads as zeros); except that a write past a file's end changes its size,
  which is metadata: it is there only if the metadata before it is.

``sync_file_range`` is no barrier (it persists no metadata, and POSIX promises nothing for it).

What qvc writes is all in the trace: the staging database (``qvc/staging.db`` and its
write-ahead log ``qvc/staging.db-wal``, written by SQLite with ``pwrite64``, flushed with
``fdatasync``), and git's files that publication writes. SQLite's shared-memory index
(``staging.db-shm``) is written through a memory map, which no system call shows: a state keeps
whatever the traced writes left in it, and SQLite rebuilds the index from the log when the
first connection opens it (any content is a state a power cut may leave). Each operation
notes the thread that made it (``tid``).
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field

SYSCALLS = ("open,openat,creat,write,pwrite64,writev,pwritev,pwritev2,lseek,fsync,fdatasync,syncfs,sync,"
            "sync_file_range,rename,renameat,renameat2,link,linkat,unlink,unlinkat,mkdir,mkdirat,rmdir,"
            "ftruncate,truncate")

_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
_CALL = re.compile(r"^([a-z0-9_]+)\((.*)\)\s+=\s+(-?\d+)(?:<([^>]*)>)?")
_TOKEN = re.compile(r'"((?:[^"\\]|\\.)*)"(\.\.\.)?|(AT_FDCWD|\d+)<([^>]*)>|([A-Za-z0-9_|]+)')
METADATA = ("create", "rename", "link", "unlink", "mkdir", "rmdir")


def strace_command(log: str) -> list[str]:
    """The ``strace`` prefix that records what :func:`parse` reads."""
    return ["strace", "-f", "-ttt", "-y", "-qq", "-xx", "-s", str(1 << 24), "-o", log, "-e", "trace=" + SYSCALLS]


def _unescape(s: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "x":
                out.append(int(s[i + 2 : i + 4], 16))
                i += 4
                continue
            out += {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\", '"': b'"'}.get(n, n.encode())
            i += 2
            continue
        out += c.encode()
        i += 1
    return bytes(out)


@dataclass
class Op:
    kind: str  # create write trunc rename link unlink mkdir rmdir fsync syncfs mark
    path: str = ""  # relative to the traced directory
    dest: str = ""  # rename / link target
    ino: int = 0  # file identity (create, write, trunc, fsync of a file; rename and link: the file moved)
    offset: int = 0
    data: bytes = b""
    size: int = 0
    start: int = 0  # barriers: how many operations preceded the call (those it covers)
    time: float = 0.0
    directory: bool = False  # fsync of a directory
    tid: int = 0  # the thread that made the call (strace's pid column)
    grows: bool = False  # a write past the file's end: its new size is metadata, ordered with the rest


@dataclass
class FS:
    """Directory entries (path -> inode), inode data and directories: a state of the tree."""

    files: dict[str, int] = field(default_factory=dict)
    data: dict[int, bytes] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    #: inode -> modification time (ns). A state keeps them (what reads a file's identity sees
    #: one a power cut may leave): a traced file gets the time of its last kept write, less 10 ms
    #: (the kernel stamps files from a clock a tick behind the one strace reads).
    mtimes: dict[int, int] = field(default_factory=dict)

    @classmethod
    def load(cls, root: str) -> FS:
        fs = cls()
        for top, _dirs, files in os.walk(root):
            rel = os.path.relpath(top, root)
            fs.dirs.add("" if rel == "." else rel)
            for name in files:
                ino = -(len(fs.files) + 1)  # base files: negative identities, traced ones positive
                with open(os.path.join(top, name), "rb") as f:
                    fs.data[ino] = f.read()
                    fs.mtimes[ino] = os.fstat(f.fileno()).st_mtime_ns
                fs.files[os.path.normpath(os.path.join(rel, name))] = ino
        return fs

    def copy(self) -> FS:
        return FS(dict(self.files), dict(self.data), set(self.dirs), dict(self.mtimes))

    def write_to(self, root: str) -> None:
        for d in sorted(self.dirs, key=len):
            os.makedirs(os.path.join(root, d), exist_ok=True)
        for path, ino in self.files.items():
            parent = os.path.dirname(path)
            if parent in self.dirs:
                target = os.path.join(root, path)
                with open(target, "wb") as f:
                    f.write(self.data.get(ino, b""))
                if ino in self.mtimes:
                    os.utime(target, ns=(self.mtimes[ino], self.mtimes[ino]))

    def fingerprint(self) -> int:
        return hash((tuple(sorted((p, self.data.get(i, b"")) for p, i in self.files.items())),
                     tuple(sorted(self.dirs))))


def parse(log: str, root: str, markers: str, base: FS) -> list[Op]:
    """The file-system operations under ``root`` (and marker writes to ``markers``), in trace order."""
    root = os.path.abspath(root).rstrip("/") + "/"
    live = base.copy()  # the tree as the process saw it, to tell creates from opens
    next_ino = 1
    pos: dict[int, int] = {}  # fd -> file offset (the writer's threads share one fd table)
    appending: set[int] = set()  # fds opened with O_APPEND
    opened: dict[int, int] = {}  # fd -> the inode it was opened on (its name may be gone: a file linked, then unlinked)
    pending: dict[str, tuple[str, int, float]] = {}  # pid -> (start of an unfinished call, ops before it, time)
    ops: list[Op] = []
    tagged, last_pid = 0, "0"  # ops made by the line of thread ``last_pid`` start at ``tagged``

    def rel(p: str) -> str | None:
        if p + "/" == root:
            return ""
        return os.path.normpath(p[len(root):]) if p.startswith(root) else None

    with open(log, encoding="latin-1") as f:
        lines = f.read().splitlines()
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        pid, t, rest = m.group(1), float(m.group(2)), m.group(3)
        for op in ops[tagged:]:
            op.tid = int(last_pid)
        tagged, last_pid = len(ops), pid
        start = len(ops)
        if rest.endswith("<unfinished ...>"):
            pending[pid] = (rest[: -len("<unfinished ...>")].rstrip(), len(ops), t)
            continue
        if rest.startswith("<... "):
            head, n_before, _t0 = pending.pop(pid)
            rest = head + rest[rest.index("resumed>") + len("resumed>"):]
            start = n_before
        call = _CALL.match(rest)
        if not call or int(call.group(3)) < 0:
            continue
        name, args, ret, ret_path = call.group(1), call.group(2), int(call.group(3)), call.group(4)
        toks = []
        for tm in _TOKEN.finditer(args):
            if tm.group(1) is not None:
                if tm.group(2):
                    raise ValueError(f"strace cut a string short (raise -s): {line[:200]}")
                toks.append(("str", _unescape(tm.group(1))))
            elif tm.group(3) is not None:
                toks.append(("fd", (tm.group(3), _unescape(tm.group(4)).decode("utf-8", "surrogateescape"))))
            else:
                toks.append(("word", tm.group(5)))
        fds = [v for k, v in toks if k == "fd"]
        strs = [v.decode("utf-8", "surrogateescape") for k, v in toks if k == "str"]
        words = [v for k, v in toks if k == "word"]

        def absolute(path: str, dirfd: tuple[str, str] | None) -> str:
            return path if path.startswith("/") else os.path.join(dirfd[1] if dirfd else os.getcwd(), path)

        if name in ("open", "openat", "creat"):
            path = _unescape(ret_path).decode("utf-8", "surrogateescape") if ret_path else absolute(
                strs[0], fds[0] if fds else None)
            flags = " ".join(words)
            pos[ret] = 0
            if "O_APPEND" in flags:
                appending.add(ret)
            else:
                appending.discard(ret)
            r = rel(path)
            if r is None or "O_DIRECTORY" in flags:
                continue
            if (name == "creat" or "O_CREAT" in flags) and r not in live.files:
                live.files[r] = next_ino
                live.data[next_ino] = b""
                ops.append(Op("create", r, ino=next_ino, time=t))
                next_ino += 1
            elif ("O_TRUNC" in flags or name == "creat") and r in live.files and (
                    "O_WRONLY" in flags or "O_RDWR" in flags):
                live.data[live.files[r]] = b""
                ops.append(Op("trunc", r, ino=live.files[r], size=0, time=t))
            if r in live.files:
                opened[ret] = live.files[r]
            continue
        if name == "lseek":
            pos[int(fds[0][0])] = ret
            continue
        if name in ("writev", "pwritev", "pwritev2"):
            if fds and rel(fds[0][1]) is not None:
                raise ValueError(f"unsupported vectored write under the traced directory: {line[:200]}")
            continue
        if name in ("write", "pwrite64"):
            fd, path = fds[0]
            data = [v for k, v in toks if k == "str"][0][:ret]
            if path == markers:
                ops.append(Op("mark", data=data, time=t))
                continue
            r = rel(path.removesuffix(" (deleted)"))
            if r is None:
                continue
            ino = live.files.get(r) if r in live.files else opened.get(int(fd))
            if ino is None:
                continue
            cur = live.data[ino]
            if name == "pwrite64":
                off = int(words[-1])
            elif int(fd) not in appending:
                off = pos.get(int(fd), 0)
            else:
                off = len(cur)
            if name == "write":
                pos[int(fd)] = off + ret
            live.data[ino] = _overlay(cur, off, data)
            ops.append(Op("write", r, ino=ino, offset=off, data=data, time=t, grows=off + len(data) > len(cur)))
            continue
        if name in ("ftruncate", "truncate"):
            path = fds[0][1] if name == "ftruncate" else absolute(strs[0], None)
            r = rel(path)
            if r is not None and r in live.files:
                size = int(words[-1])
                ino = live.files[r]
                live.data[ino] = live.data[ino][:size].ljust(size, b"\0")
                ops.append(Op("trunc", r, ino=ino, size=size, time=t))
            continue
        if name in ("fsync", "fdatasync"):
            r = rel(fds[0][1])
            if r is None:
                continue
            if r in live.dirs:
                ops.append(Op("fsync", r, directory=True, start=start, time=t))
            elif r in live.files:
                ops.append(Op("fsync", r, ino=live.files[r], start=start, time=t))
            continue
        if name in ("syncfs", "sync"):
            ops.append(Op("syncfs", start=start, time=t))
            continue
        if name in ("rename", "renameat", "renameat2", "link", "linkat"):
            if name in ("rename", "link"):
                src, dst = absolute(strs[0], None), absolute(strs[1], None)
            else:
                src, dst = absolute(strs[0], fds[0]), absolute(strs[1], fds[1])
            rs, rd = rel(src), rel(dst)
            if rs is None and rd is None:
                continue
            assert rs is not None and rd is not None, f"rename across the traced directory: {line[:200]}"
            kind = "link" if name.startswith("link") else "rename"
            moved = live.files.get(rs, 0)  # the inode it names (0: not a file known here)
            if rs in live.files:
                live.files[rd] = live.files[rs]
                if kind == "rename":
                    del live.files[rs]
            elif rs in live.dirs:
                raise ValueError(f"directory rename under the traced directory is not modelled: {line[:200]}")
            ops.append(Op(kind, rs, rd, ino=moved, time=t))
            continue
        if name in ("unlink", "unlinkat", "rmdir", "mkdir", "mkdirat"):
            path = absolute(strs[0], fds[0] if name.endswith("at") else None)
            r = rel(path)
            if r is None:
                continue
            if name == "rmdir" or (name == "unlinkat" and "AT_REMOVEDIR" in words):
                live.dirs.discard(r)
                ops.append(Op("rmdir", r, time=t))
            elif name.startswith("mkdir"):
                live.dirs.add(r)
                ops.append(Op("mkdir", r, time=t))
            else:
                live.files.pop(r, None)
                ops.append(Op("unlink", r, time=t))
    for op in ops[tagged:]:
        op.tid = int(last_pid)
    return ops


def _overlay(cur: bytes, off: int, data: bytes) -> bytes:
    if off > len(cur):
        cur = cur + b"\0" * (off - len(cur))
    return cur[:off] + data + cur[off + len(data):]


class Trace:
    """The operations of one traced run over a base tree, and the crash states they allow."""

    def __init__(self, base: FS, ops: list[Op]):
        self.base = base
        self.ops = ops
        # covered_at[i]: index of the first barrier that makes operation i durable (len(ops) if none)
        self.covered_at = [len(ops)] * len(ops)
        barriers = [(j, op) for j, op in enumerate(ops) if op.kind in ("fsync", "syncfs")]
        for i, op in enumerate(ops):
            if op.kind in ("mark", "fsync", "syncfs"):
                continue
            for j, b in barriers:
                if b.start <= i:
                    continue
                if b.kind == "syncfs" or self._covers(b, op):
                    self.covered_at[i] = j
                    break

    @staticmethod
    def _covers(barrier: Op, op: Op) -> bool:
        if barrier.directory:
            if op.kind in ("write", "trunc"):
                return False
            if op.kind in ("rename", "link"):  # the new name is an entry of the target's directory
                return os.path.dirname(op.dest) == barrier.path
            return os.path.dirname(op.path) == barrier.path
        return op.kind in ("write", "trunc") and op.ino == barrier.ino

    def state(self, p: int, rng: random.Random | None, *, keep_data: bool = False,
              keep_metadata: bool = False) -> FS:
        """A state a power cut right before operation ``p`` may leave.

        With ``rng`` the un-synced operations are chosen at random (metadata: a prefix; data:
        each kept, dropped or torn); without it, ``keep_data`` / ``keep_metadata`` keep all or
        none of them (both: what a process kill leaves).
        """
        meta = [i for i in range(p) if self.ops[i].kind in METADATA and self.covered_at[i] >= p]
        cut = rng.randint(0, len(meta)) if rng else (len(meta) if keep_metadata else 0)
        kept_meta = set(meta[:cut])
        first_lost = meta[cut] if cut < len(meta) else p  # metadata from here on did not reach the disk
        fs = self.base.copy()
        for i in range(p):
            op = self.ops[i]
            durable = self.covered_at[i] < p
            if op.kind in METADATA and not durable and i not in kept_meta:
                continue
            if op.kind == "create":
                if os.path.dirname(op.path) in fs.dirs and op.path not in fs.files:
                    fs.files[op.path] = op.ino
                    fs.data.setdefault(op.ino, b"")
                    fs.mtimes[op.ino] = int((op.time - 0.01) * 1e9)
            elif op.kind in ("rename", "link"):
                # the inode the call named, even where the name it had is gone from this state
                # (a file linked in from a directory whose own entries were never flushed)
                ino = op.ino or fs.files.get(op.path)
                if ino and os.path.dirname(op.dest) in fs.dirs:
                    fs.files[op.dest] = ino
                    if ino not in fs.data:
                        fs.data[ino] = b""
                if op.kind == "rename":
                    fs.files.pop(op.path, None)
            elif op.kind == "unlink":
                fs.files.pop(op.path, None)
            elif op.kind == "mkdir":
                if os.path.dirname(op.path) in fs.dirs:
                    fs.dirs.add(op.path)
            elif op.kind == "rmdir":
                fs.dirs.discard(op.path)
            elif op.kind in ("write", "trunc"):
                data = op.data
                if not durable:
                    if op.grows and i > first_lost:
                        continue  # the file's new size was not committed: the write is not there
                    if rng is not None:
                        choice = rng.random()
                        if choice < 0.35:
                            continue
                        if choice < 0.55 and op.kind == "write" and data:
                            data = data[: rng.randrange(len(data))]
                    elif not keep_data:
                        continue
                cur = fs.data.get(op.ino, b"")
                fs.mtimes[op.ino] = int((op.time - 0.01) * 1e9)
                if op.kind == "trunc":
                    fs.data[op.ino] = cur[: op.size].ljust(op.size, b"\0")
                else:
                    fs.data[op.ino] = _overlay(cur, op.offset, data)
        return fs
