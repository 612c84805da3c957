"""Progress of ``mixreplay demo``: one bar per run, each with its own clock.

A bar waits as ``queued`` until a worker starts its run, then counts that run's
environment steps; its elapsed time and rate are the run's own (from its start to
its end), not the time since the demo began. Runs share the cores, so a run's own
time is what one arm on one seed took while its sibling ran beside it.

Where stderr is not a terminal (a log file, CI), bars would leave a line per redraw:
:class:`RunLines` prints one line when a run starts and one when it ends instead.

Only :mod:`mixreplay.demo.cli` draws these (library code never prints); it
imports this module when the demo starts, since it needs tqdm.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["RunBar", "RunBars", "RunLines"]

# tqdm's default, without the colon it puts after the (padded) label
_FORMAT = "{desc}  {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


class RunBar(tqdm):
    """A tqdm bar whose clock starts at :meth:`begin` and stops at :meth:`end`.

    Args:
        clock: seconds, monotonic (default :func:`time.monotonic`); a test can pass its own.
        *args, **kwargs: as for ``tqdm``.

    Examples:
        >>> import io
        >>> now = [0.0]
        >>> bar = RunBar(total=10, file=io.StringIO(), clock=lambda: now[0])
        >>> bar.begin(); now[0] = 4.0; bar.update(10); bar.end(); now[0] = 60.0
        >>> bar.span  # the clock's readings at begin and end: the bar shows 00:04, not 01:00
        (0.0, 4.0)
        >>> bar.close()
    """

    def __init__(self, *args: Any, clock: Callable[[], float] = time.monotonic, **kwargs: Any):
        # set before tqdm's __init__, which draws the bar (and so reads format_dict)
        self._clock = clock
        self._began: float | None = None
        self._ended: float | None = None
        super().__init__(*args, **kwargs)

    @property
    def span(self) -> tuple[float | None, float | None]:
        """The clock's readings at :meth:`begin` and :meth:`end` (``None`` until each happens)."""
        return self._began, self._ended

    def _elapsed_s(self) -> float:
        """Seconds from :meth:`begin` to :meth:`end` (or to now while running); 0 while queued."""
        if self._began is None:
            return 0.0
        return (self._clock() if self._ended is None else self._ended) - self._began

    def begin(self) -> None:
        """The run started: its clock starts now."""
        self._began = self._clock()
        self.set_postfix_str("", refresh=False)
        self.refresh()

    def end(self) -> None:
        """The run finished: its clock stops now."""
        if self._began is None:  # a start report lost on the way: count from now
            self._began = self._clock()
        self._ended = self._clock()
        self.refresh()

    @property
    def running(self) -> bool:
        return self._began is not None and self._ended is None

    @property
    def format_dict(self) -> dict:
        values = dict(super().format_dict)
        values["elapsed"] = self._elapsed_s()  # tqdm derives the shown time and rate from it
        return values

    def close(self) -> None:
        if self._ended is not None:
            self._ema_dt = lambda: None  # final rate: steps / own time, not the smoothed one
        super().close()


class RunBars:
    """One :class:`RunBar` per run, labelled ``"<arm label>, seed <n>"``, all queued at first.

    Args:
        labels: one label per run, in the order of the runs.
        totals: each run's number of steps.
        file: where to draw (default stderr).
        clock: passed to every bar.
    """

    def __init__(
        self,
        labels: Sequence[str],
        totals: Sequence[int],
        *,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        width = max((len(label) for label in labels), default=0)
        self.bars = [
            RunBar(
                total=total,
                desc=label.ljust(width),
                bar_format=_FORMAT,
                position=i,
                unit=" steps",
                leave=True,
                dynamic_ncols=True,
                file=file,
                postfix="queued",
                clock=clock,
            )
            for i, (label, total) in enumerate(zip(labels, totals, strict=True))
        ]

    def start(self, index: int) -> None:
        self.bars[index].begin()

    def advance(self, index: int, steps: int) -> None:
        self.bars[index].update(steps)

    def finish(self, index: int, _records: object = None) -> None:
        self.bars[index].end()

    def tick(self) -> None:
        """Redraw the running bars, so that their clocks move between step reports."""
        for bar in self.bars:
            if bar.running:
                bar.refresh()

    def close(self) -> None:
        for bar in self.bars:
            bar.close()

    def __enter__(self) -> RunBars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunLines:
    """The same reports as :class:`RunBars`, as plain lines: one per run start, one per run end.

    Args:
        labels: one label per run, in the order of the runs.
        totals: each run's number of steps.
        file: where to write (default stderr).
        clock: seconds, monotonic (default :func:`time.monotonic`).

    Examples:
        >>> import io
        >>> now, out = [0.0], io.StringIO()
        >>> lines = RunLines(["online only, seed 0"], [2000], file=out, clock=lambda: now[0])
        >>> lines.start(0); now[0] = 12.0; lines.advance(0, 2000); lines.finish(0)
        >>> print(out.getvalue(), end="")
        [   0 s] online only, seed 0: started
        [  12 s] online only, seed 0: 2,000 steps in 12 s
    """

    def __init__(
        self,
        labels: Sequence[str],
        totals: Sequence[int],
        *,
        file: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.labels = list(labels)
        self.totals = list(totals)
        self.file = file
        self.clock = clock
        self.origin = clock()
        self.began: dict[int, float] = {}
        self.steps = [0] * len(self.labels)

    def _say(self, text: str) -> None:
        file = sys.stderr if self.file is None else self.file
        print(f"[{self.clock() - self.origin:4.0f} s] {text}", file=file, flush=True)

    def start(self, index: int) -> None:
        self.began[index] = self.clock()
        self._say(f"{self.labels[index]}: started")

    def advance(self, index: int, steps: int) -> None:
        self.steps[index] += steps

    def finish(self, index: int, records: object = None) -> None:
        took = self.clock() - self.began.get(index, self.origin)
        last = records[-1] if isinstance(records, list) and records else {}
        ending = f", final return {last['return']:,.1f}" if "return" in last else ""
        # the worker's last progress reports may still be in the queue's pipe when its result
        # arrives (a loaded machine): the last record's step is what the run did reach
        steps = max(self.steps[index], int(last.get("step", 0)))
        self._say(f"{self.labels[index]}: {steps:,} steps in {took:.0f} s{ending}")

    def tick(self) -> None:
        """Nothing to redraw."""

    def close(self) -> None:
        """Nothing to close."""

    def __enter__(self) -> RunLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
