"""The engine behind `srag run`, `rerun`, `judge`, `sweep`, `report`, `compare`, `estimate`, `review` and `car`: rooms
by job, each a package whose `__init__` re-exports its public names over private `_x.py` modules. A room uses the
rooms below it, never one above (`tests/test_layout.py`):

    runner     running runs: a sweep as one job on one pool (`run_sweep`, `resume_sweep`, `rerun_sweep`,
               `judge_sweep`), `srag run` as a sweep of one (`run_one`, `continue_run`), each run's own steps from
               its inputs to its summary (`start_run`, `finish`), the sweep's plan and checks (`sweep_plan`), the
               progress lines, `srag estimate`'s pilots
    reports    what is reported, read back from the run folders: a run's rows and summary, a sweep's table,
               comparisons and ranking, `srag compare`, the papers' table, the catalogue of a runs folder
    review     is the judge right? a blind sample for people to label, their labels back, and what they say
    tracking   MLflow: a run's MLflow run, metrics and tables (`Tracker`), one trace per episode, exported off the
               driver exactly once (`ExportPool`)
    cluster    where work runs, on Ray: connecting (`init_ray`), the pool of one invocation (`Pool`: its workers
               placed node by node, one limiter per endpoint), the episode workers, the scheduler (`Scheduler`,
               one `Lane` per run), each run's running totals and reasons to stop
    scoring    one outcome per question and the run's figures, their intervals, the paired comparison, and the
               judge stage
    systems    the systems under test: a variant's name -> what answers one question, and its per-corpus stage
    endpoint   the model endpoint: what an endpoint is, whether it answers, and the local model server
    store      what is stored on disk: run folders and their append-only results store, sweep folders, the
               driver's heartbeat
    records    what a run writes, as typed models (`StoredModel`): results.jsonl's lines, run.json, the summary,
               sweep.json
    car        `srag car`: the CAR baseline cells and their grid

Importing any room loads nothing heavy: Ray and MLflow are imported inside the functions that use them (Ray fixes its
node address when it is first imported, and only `cluster.init_ray` puts a local instance on loopback).
"""
