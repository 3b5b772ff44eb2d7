"""What the benchmarks that drive the pipeline share: a scripted endpoint in a process of its own (so it does not
take the driver's CPU), and a markdown table."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from tests.fake_llm import FakeLLM

if TYPE_CHECKING:
    from pipelines.config import RunConfig
    from pipelines.engine.records import RunSummary
    from pipelines.engine.store import RunDir


def _serve(responder: Callable[[dict], Any], conn) -> None:
    with FakeLLM(responder=responder) as server:
        conn.send(server.base_url)
        conn.recv()  # run until told to stop


@contextmanager
def scripted_endpoint(responder: Callable[[dict], Any]) -> Iterator[str]:
    """The base URL of a scripted OpenAI-compatible server answering with `responder` (picklable) until the block
    ends."""
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(responder, child), daemon=True)
    server.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        server.join(timeout=10)


def run_in_process(cfg: RunConfig, runs_dir: Path) -> tuple[RunDir, RunSummary, float]:
    """A run of `cfg` in this process, as `srag run` drives it (start, pending work, execute, finish): its folder,
    summary and seconds from start to finished."""
    import time

    from pipelines.engine.runner import execute, finish, open_tracker, pending_work, start_run

    tracker = open_tracker(cfg, runs_dir)
    started = time.monotonic()
    run_dir = start_run(cfg, runs_dir, tracker)
    todo, _ = pending_work(run_dir, None)
    execute(run_dir, cfg, todo, tracker, quiet=True)
    summary = finish(run_dir, tracker)
    tracker.close()
    return run_dir, summary, time.monotonic() - started


def print_rows(rows: list[dict[str, Any]], json_out: Path | None) -> None:
    """The rows as a markdown table on stdout, and as JSON in `json_out` when given."""
    print("\n" + markdown_table(rows))
    if json_out:
        json_out.write_text(json.dumps(rows, indent=2))


def markdown_table(rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows])
