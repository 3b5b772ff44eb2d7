"""The engine behind `srag run`, `rerun`, `judge`, `sweep`, `report`, `compare` and `car`, each part with one job:

- `lifecycle`: a run from its inputs to its summary (`run_one`, `continue_run`, `start_run`, `execute`, `finish`);
- `placement`: the execution plan read off the cluster, and the node each episode worker is placed on;
- `scheduler`: keeps the Ray workers busy, requeues episodes of dead workers, hands episodes to the judge and reports
  to sinks (`RunSink`), so the results store and MLflow can be tested and replaced apart;
- `worker`: the Ray actor holding a corpus replica and running episodes, and the shared request limiter (adaptive);
- `judging`: the judge stage on driver threads, and `rejudge` (`srag judge`);
- `scoring`: one outcome per question, the run's figures and intervals, the paired comparison;
- `records`: what a run writes, as typed models (episode and judgement lines, run.json, the summary and its views);
- `results`: run folders and the append-only results store (`RunFolderSink`);
- `tracking`: MLflow (`Tracker`, `MlflowSink`);
- `trace_export`: episode traces into MLflow, off the driver, exactly once (`TraceExportActor`, `export_missing`);
- `progress`: running totals and the progress line;
- `report`: per-question rows, summaries, plots; `sweeps`: sweeps and reports read back from run folders;
  `sweep_plan`: what a sweep would run (`srag sweep --dry-run`), starting nothing;
- `systems`: the system under test per variant; `endpoints`: the LLM endpoint (a local model server if configured);
- `ray_utils`: connecting to Ray and a sandboxed map over Ray tasks.
- `car_grid`: `srag car`'s CAR baseline cells, a grid of them as Ray tasks, logged to MLflow.

Modules are imported directly (`from pipelines.engine.lifecycle import run_one`): importing this package loads
nothing heavy.
"""
