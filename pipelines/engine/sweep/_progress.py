"""A sweep's progress: one line on stderr for the whole sweep (runs finished, in flight and planned; episodes done of
all; what was spent; time left) and the same as `live/` metrics on its parent MLflow run, at each of the scheduler's
progress ticks."""

from __future__ import annotations

import sys
import time

from pipelines.engine.progress import clock
from pipelines.engine.scheduler import Scheduler
from pipelines.engine.sweep._driver import Runs
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

    def figures(self, scheduler: Scheduler, runs: Runs) -> dict[str, float]:
        with runs.lock:
            opened = list(runs.opened.values())
            closed = set(runs.closed)
        finished = len(closed)
        lanes = {lane.key: lane for lane in (*scheduler.ended, *scheduler.lanes)}
        done = self.done_before + sum(lane.stats.done for lane in lanes.values()) + sum(
            r.extra.get("done", 0) for r in opened if r.lane is None)
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
        if self.first is not None and done > self.first[1]:
            rate = (done - self.first[1]) / max(1e-6, now - self.first[0])
            out["seconds_left"] = round(max(0, self.episodes - done) / rate, 1)
        return out

    def tick(self, scheduler: Scheduler, runs: Runs) -> None:
        m = self.figures(scheduler, runs)
        if not self.quiet:
            left = clock(m["seconds_left"]) if "seconds_left" in m else "--:--"
            print(f"[sweep {self.sweep_id}] runs {m['runs_finished']} finished · {m['runs_in_flight']} in flight · "
                  f"{m['runs_planned']} planned · episodes {m['episodes_done']}/{m['episodes_total']} · "
                  f"${m['spent_usd']:.4f} spent · ~{left} left", file=sys.stderr, flush=True)
        if self.tracker is not None and self.parent:
            self.tracker.log_metrics(self.parent, {f"live/{k}": v for k, v in m.items()}, step=int(m["episodes_done"]))
