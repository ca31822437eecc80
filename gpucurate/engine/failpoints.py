"""Crash points for the crash-safety tests: ``GPUCURATE_FAILPOINT=NAME`` kills the process (SIGKILL, like
a power cut or an OOM kill) when it reaches ``failpoint(NAME)``; ``NAME@PATH`` kills only the first
process to get there (it creates PATH), so a retried task succeeds. Unset, a failpoint costs one
environment lookup."""

from __future__ import annotations

import os
import signal


def failpoint(name: str) -> None:
    spec = os.environ.get("GPUCURATE_FAILPOINT")
    if not spec:
        return
    point, _, once = spec.partition("@")
    if point != name:
        return
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
