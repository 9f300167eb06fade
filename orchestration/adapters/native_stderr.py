"""The process's own stderr file descriptor, for what native code writes to it: Ray's C++ core writes its log lines
(glog) straight to file descriptor 2, past every logger and level of Python's, and one of them, ray-project/ray#53727
(an actor pool created with its constructor's arguments in the object store, as Ray Data's pools are), is a note
to Ray's developers about no work of the user's.

`hold_back(pattern)` puts a small filter process between descriptor 2 and the terminal (or file) it pointed at: it
copies every line through as it comes, except those matching `pattern`. Python's own `sys.stderr` is moved to a
copy of the original descriptor, so the command's lines, its progress line and whether it writes to a terminal
are unchanged. The filter is a process, not a thread, so that what a dying process writes last (a fatal error, a
faulthandler traceback) still comes out: it ends when every writer of its pipe has closed it, and ignores the
terminal's signals (its own session), so Ctrl-C never leaves the command's native output with no reader.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import subprocess
import sys

# Run with `python -I -S -c`: no site, no imports beyond these. Lines as they come; a last line without its
# newline too. An unreadable byte is copied as it is.
_FILTER = """
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
skip = re.compile(sys.argv[1].encode())
source, sink = sys.stdin.buffer, sys.stdout.buffer
for line in iter(source.readline, b""):
    if not skip.search(line):
        sink.write(line)
        sink.flush()
"""

_installed: tuple[int, subprocess.Popen] | None = None  # the original descriptor's copy, the filter


def hold_back(pattern: str) -> None:
    """From now on, lines written to file descriptor 2 that match `pattern` (a regular expression) are dropped;
    every other line reaches where stderr pointed. Undone at exit (`release`); a second call does nothing."""
    global _installed
    if _installed is not None:
        return
    sys.stderr.flush()
    original = os.dup(2)
    os.set_inheritable(original, False)
    reader, writer = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _FILTER, pattern],
            stdin=reader,
            stdout=original,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:  # no process to spare: the lines stay, nothing else changes
        for fd in (original, reader, writer):
            os.close(fd)
        return
    os.close(reader)
    os.dup2(writer, 2)  # inheritable: processes started from now on write through the filter too
    os.close(writer)
    _installed = (original, process)
    _move_python_stderr(original)
    atexit.register(release)


def release(timeout: float = 5.0) -> None:
    """Point descriptor 2 back where it was and let the filter copy what it still holds, for at most `timeout`
    seconds (a process this one started that still holds the pipe keeps it running, never this one)."""
    global _installed
    if _installed is None:
        return
    original, process = _installed
    _installed = None
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
    os.dup2(original, 2)  # the pipe's last writer here is closed with it
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout)


def _move_python_stderr(fd: int) -> None:
    """`sys.stderr`, and the logging handlers that wrote to it, onto `fd` (a copy of the original descriptor 2)."""
    before = sys.stderr
    encoding = getattr(before, "encoding", None) or "utf-8"
    errors = getattr(before, "errors", None) or "backslashreplace"
    sys.stderr = io.TextIOWrapper(
        io.FileIO(fd, "w", closefd=False), encoding=encoding, errors=errors, line_buffering=True, write_through=True
    )
    loggers = [logging.getLogger(), *(v for v in logging.Logger.manager.loggerDict.values())]
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and handler.stream is before:
                handler.setStream(sys.stderr)
