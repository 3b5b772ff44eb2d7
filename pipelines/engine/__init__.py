"""The engine behind `srag run`, `rerun`, `judge`, `sweep`, `report`, `compare` and `car`, each part with one job:

- `sweep/`: running runs: a sweep as one job on one pool of workers, `srag run` as a sweep of one run, their plan
  (sweep.json), resume, progress, and `srag sweep --dry-run`'s checks (`run_one`, `continue_run`, `run_sweep`,
  `resume_sweep`, `run_jobs`);
- `lifecycle`: a run's own steps, from its inputs to its summary (`start_run`, `pending_work`, `finish`);
- `placement`: the execution plan read off the cluster, and the node each episode worker is placed on;
- `scheduler`: keeps the Ray workers busy with the episodes of several runs (`Lane`), requeues episodes of dead
  workers, hands episodes to each run's judge and reports to its sinks (`RunSink`), so the results store and MLflow
  can be tested and replaced apart;
- `worker`: the run-agnostic Ray actor holding corpus replicas and running episodes, and the request limiter of an
  endpoint (adaptive);
- `heartbeat`: a driver's heartbeat in the folders it drives, and whether a driver is alive;
- `judging`: the judge stage on driver threads, and `rejudge` (`srag judge`);
- `scoring`: one outcome per question, the run's figures and intervals, the paired comparison;
- `records`: what a run writes, as typed models (episode and judgement lines, run.json, the summary and its views);
- `results`: run folders and the append-only results store (`RunFolderSink`);
- `tracking`: MLflow (`Tracker`, `MlflowSink`);
- `trace_export`: episode traces into MLflow, off the driver, exactly once (`ExportPool`, `export_missing`);
- `progress`: running totals and the progress line;
- `report`: per-question rows, summaries, plots; `sweeps`: a sweep's reports and comparisons, read back from its
  folders;
- `systems`: the system under test per variant; `endpoints`: the LLM endpoint (a local model server if configured);
- `ray_utils`: connecting to Ray and a sandboxed map over Ray tasks.
- `car_grid`: `srag car`'s CAR baseline cells, a grid of them as Ray tasks, logged to MLflow.

Modules are imported directly (`from pipelines.engine.lifecycle import finish`, `from pipelines.engine.sweep
import run_one`): importing this package loads nothing heavy.
"""
