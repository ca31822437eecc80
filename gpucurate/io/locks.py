"""An exclusive lock file, held by one process at a time (an output directory's writer, an ingest state)."""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from ..errors import LockedError


class FileLock:
    """Exclusive ``flock`` of the file ``path``, held by one process at a time; a second one fails at once
    with ``error`` naming the holder (pid, host, start time, as the holder wrote them into the file).

    The kernel releases the lock when the holder dies (even by SIGKILL), so a stale lock file never
    blocks. The file itself stays: deleting it would let two processes lock two different inodes.
    ``message`` is formatted with ``holder``.
    """

    def __init__(self, path: Path, message: str, error: type = LockedError, command: str = "gpucurate"):
        self.path, self.message, self.error, self.command = Path(path), message, error, command
        self.fh = None

    def __enter__(self) -> "FileLock":
        self.fh = open(self.path, "a+")
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.fh.seek(0)
            holder = self.fh.read().strip() or "another process"
            self.fh.close()
            self.fh = None
            raise self.error(self.message.format(holder=holder)) from None
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: {self.command}\n")
        self.fh.flush()
        return self

    def __exit__(self, *exc) -> None:
        if self.fh is not None:
            fcntl.flock(self.fh, fcntl.LOCK_UN)
            self.fh.close()
            self.fh = None
