"""Progress: a run's own line on stderr (`ConsoleProgress`, a scheduler sink, for a run alone) and a sweep's one
line for all its runs (`SweepProgress`: runs finished, in flight and planned; episodes done of all; what was spent;
time left), the same as `live/` metrics on its parent MLflow run, at each of the scheduler's progress ticks."""

from __future__ import annotations

import sys
import time

from pipelines.engine.cluster import Countdown, RunStats, Scheduler, time_left
from pipelines.engine.records import EpisodeRecord, Judgement
from pipelines.engine.tracking import Tracker


class SweepProgress:
    def __init__(self, sweep_id: str, runs: int, episodes: int, *, finished_before: int = 0, done_before: int = 0,
                 tracker: Tracker | None = None, parent: str | None = None, quiet: bool = False):
        """`runs` and `episodes`: the sweep's in all; `finished_before` and `done_before`: the runs that ended, and
        the episodes recorded, before this invocation's pool (in runs it does not run)."""
        self.sweep_id, self.runs, self.episodes = sweep_id, runs, episodes
        self.finished_before, self.done_before = finished_before, done_before
        self.tracker, self.parent, self.quiet = tracker, parent, quiet
        self.first: tuple[float, int] | None = None  # (monotonic time, episodes done) at the first tick with work
        self.countdown = Countdown()

    def figures(self, scheduler: Scheduler, closed: set[str], done_unscheduled: int) -> dict[str, float]:
        """`closed`: the runs (by run id) that reached their end in this invocation; `done_unscheduled`: the episodes
        done of the runs opened that gave the scheduler nothing to run."""
        finished = len(closed)
        lanes = {lane.key: lane for lane in (*scheduler.ended, *scheduler.lanes)}
        done = self.done_before + sum(lane.stats.done for lane in lanes.values()) + done_unscheduled
        # in flight: episodes started, or its episodes ended and its end (traces, verdicts, summary) not reached yet
        in_flight = sum(1 for lane in scheduler.lanes if lane.first_dispatch is not None) + sum(
            1 for lane in scheduler.ended if lane.key not in closed)
        finished += self.finished_before
        out = {"runs_finished": finished, "runs_in_flight": in_flight,
               "runs_planned": max(0, self.runs - finished - in_flight), "episodes_done": done,
               "episodes_total": self.episodes, "spent_usd": round(scheduler.spent().spent_cost(), 6)}
        now = time.monotonic()
        if self.first is None and scheduler.first_dispatch is not None:
            self.first = (now, done)
        first = self.first

        def estimate() -> float | None:  # at the rate since this invocation's first episode started
            if first is None or done <= first[1]:
                return None
            return max(0, self.episodes - done) / ((done - first[1]) / max(1e-6, now - first[0]))

        if (left := self.countdown.left(done, now, estimate)) is not None:
            out["seconds_left"] = round(left, 1)
        return out

    def tick(self, scheduler: Scheduler, closed: set[str], done_unscheduled: int) -> None:
        m = self.figures(scheduler, closed, done_unscheduled)
        if not self.quiet:
            print(f"[sweep {self.sweep_id}] runs {m['runs_finished']} finished · {m['runs_in_flight']} in flight · "
                  f"{m['runs_planned']} planned · episodes {m['episodes_done']}/{m['episodes_total']} · "
                  f"${m['spent_usd']:.4f} spent · {time_left(m.get('seconds_left'))}", file=sys.stderr, flush=True)
        if self.tracker is not None and self.parent:
            self.tracker.log_metrics(self.parent, {f"live/{k}": v for k, v in m.items()}, step=int(m["episodes_done"]))


class ConsoleProgress:
    """The scheduler's sink for the progress line on stderr."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def episode(self, record: EpisodeRecord) -> None:
        pass

    def judgement(self, verdict: Judgement) -> None:
        pass

    def progress(self, stats: RunStats) -> None:
        import sys

        print(f"[{self.run_id}] {stats.line()}", file=sys.stderr, flush=True)
