"""Progress on stderr, by the stages a user knows (read+normalize, exact, fuzzy, ..., write).

A workflow marks its user-level stages (``stage(name)``, which ``workflows.run.Timer`` does for every timed
step); the executor opens a ``step`` for each internal step of a stage ('exact: hash', 'look up id',
'components: round 2'), counted in the stage around it. This module is the one place progress is drawn:

* in a terminal (or a notebook), each stage is a bar that stays, with its running step nested under it as a second bar that
  goes when the step ends;
* otherwise (``2> run.log``, a batch job) nothing is redrawn: each stage ends with one log line giving its
  documents, steps, tasks, rate and elapsed time. tqdm is then not even imported.

Progress is on while an ``Executor`` with ``progress=True`` is open (``Reporter.active``); a step outside any
stage is a bar of its own in a terminal and a debug line in a log.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager

log = logging.getLogger("gpucurate")

#: the reporters of the open executors, innermost last
_ACTIVE: list = []


class _NoBar:
    """What a disabled progress bar needs to be."""

    def update(self, n: int = 1) -> None:
        pass

    close = update

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Stage:
    """A user-level stage while it runs: what its line reports. ``documents``: the documents it works on
    (kept for the stages after it, which see the same run); set it when the stage learns it."""

    def __init__(self, name: str, documents: int | None):
        self.name, self.documents = name, documents
        self.steps = self.tasks = 0
        self.start = time.perf_counter()
        self.bar = None  # its terminal bar

    def line(self) -> str:
        """``exact: 3,000 documents in 0.41 s (7,317 documents/s; 6 steps, 24 tasks)``."""
        elapsed = time.perf_counter() - self.start
        notes = [f"{self.documents / elapsed:,.0f} documents/s"] if self.documents and elapsed > 0 else []
        if self.steps:
            notes.append(f"{self.steps} step{'s' * (self.steps != 1)}, {self.tasks:,} task{'s' * (self.tasks != 1)}")
        counted = f"{self.documents:,} documents in " if self.documents is not None else ""
        return f"{self.name}: {counted}{elapsed:.2f} s" + (f" ({'; '.join(notes)})" if notes else "")


class _CountedStep(_NoBar):
    """A step in a log: its tasks are counted into its stage, nothing is drawn; a step outside any stage
    says at the end, at debug level, what it did."""

    def __init__(self, desc: str, total: int, orphan: bool):
        self.desc, self.total, self.orphan = desc, total, orphan
        self.start = time.perf_counter()

    def close(self) -> None:
        if self.orphan:
            log.debug("%s: %d tasks in %.2f s", self.desc, self.total, time.perf_counter() - self.start)


class Reporter:
    """The progress of one executor's work: a terminal's bars, or a log's lines (``stream.isatty()``)."""

    def __init__(self, enabled: bool, stream=None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        # a notebook's stderr is no terminal, but tqdm draws its bars there as widgets
        self.terminal = enabled and (_isatty(self.stream) or "ipykernel" in sys.modules)
        self.stages: list[Stage] = []
        self.documents: int | None = None  # the run's documents, once a stage has said

    @contextmanager
    def active(self):
        """This reporter receives the ``stage`` and ``step`` calls while the block runs."""
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.remove(self)

    @contextmanager
    def stage(self, name: str):
        current = Stage(name, self.documents)
        if self.terminal:
            current.bar = self._tqdm(desc=name, total=None, position=len(self.stages), leave=True,
                                     bar_format="{desc}")
        self.stages.append(current)
        done = False
        try:
            yield current
            done = True
        finally:
            self.stages.pop()
            self._end(current, done)

    def _end(self, current: Stage, done: bool) -> None:
        """A finished stage's line (a failed one's bar goes: the error says the rest)."""
        if current.documents is not None:
            self.documents = current.documents
        if current.bar is not None:
            if done:
                current.bar.set_description_str(current.line(), refresh=False)
            else:
                current.bar.leave = False
            current.bar.close()
        elif done and self.enabled:
            log.info("%s", current.line())

    def step(self, total: int, desc: str, unit: str):
        """A bar (``update``, ``close``) for an internal step of ``total`` tasks, nested in the running stage."""
        if not self.enabled:
            return _NoBar()
        stage = self.stages[-1] if self.stages else None
        if stage is not None:
            stage.steps += 1
            stage.tasks += total
        if not self.terminal:
            return _CountedStep(desc, total, orphan=stage is None)
        if stage is not None:
            stage.bar.set_description_str(f"{stage.name} (step {stage.steps}: {desc})")
        return self._tqdm(desc=f"  {desc}" if stage is not None else desc, total=total, unit=unit,
                          position=len(self.stages), leave=False)

    def _tqdm(self, **kwargs):
        from tqdm.auto import tqdm
        return tqdm(file=self.stream, dynamic_ncols=True, **kwargs)


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False


@contextmanager
def stage(name: str):
    """Mark a user-level stage of the innermost open executor's run (nothing when none is open or its
    progress is off); yields the ``Stage``, whose ``documents`` the caller may set."""
    if not _ACTIVE:
        yield Stage(name, None)
        return
    with _ACTIVE[-1].stage(name) as current:
        yield current


def step(total: int, desc: str, unit: str = "task", enabled: bool = True):
    """A bar for an internal step: nested in the running stage of the innermost open executor, or on its own
    when none is open."""
    if not enabled:
        return _NoBar()
    reporter = _ACTIVE[-1] if _ACTIVE else Reporter(True)
    return reporter.step(total, desc, unit)
