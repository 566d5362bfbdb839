"""What the benchmarks measure of a process and of files, in one place.

``wchar``/``proc_io`` read ``/proc/self/io`` (Linux): ``wchar`` is the bytes this process passed
to ``write()``, ``write_bytes`` those the kernel sent to storage for it. ``allocated`` counts
the bytes files take on disk (``st_blocks``, as ``du`` does), ``apparent`` their sizes; both
take files and directory trees, and skip what is missing (or vanishes while counted).
"""

from __future__ import annotations

import os


def proc_io() -> dict[str, int]:
    """This process's ``/proc/self/io`` counters."""
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f if ":" in line)}


def wchar() -> int:
    """Bytes this process has passed to ``write()`` so far."""
    return proc_io()["wchar"]


def _files(paths: tuple[str, ...]):
    for path in paths:
        if os.path.isdir(path):
            for root, _, names in os.walk(path):
                for name in names:
                    yield os.path.join(root, name)
        else:
            yield path


def _sum(paths: tuple[str, ...], of) -> int:
    total = 0
    for path in _files(paths):
        try:
            total += of(os.lstat(path))
        except (FileNotFoundError, NotADirectoryError):
            pass
    return total


def allocated(*paths: str) -> int:
    """Bytes the files at ``paths`` (files or trees) take on disk, as ``du`` counts them."""
    return _sum(paths, lambda st: st.st_blocks * 512)


def apparent(*paths: str) -> int:
    """The sizes of the files at ``paths`` (files or trees), added up."""
    return _sum(paths, lambda st: st.st_size)
