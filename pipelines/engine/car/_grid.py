"""The engine behind `srag car`: score CAR baseline retrievers (`car_baselines`) cell by cell, a grid of cells as Ray
tasks, and log the grid to MLflow as a parent run with one child run per cell."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

# Retrievers that may reuse the dense cell's cached corpus embeddings, so their cells wait for it.
MAY_EMBED = ("dense_rerank", "two_stage", "two_stage_rssg", "regex_ner")
METRICS = ("tca_at_k", "recall_at_k", "mean_rank", "median_rank", "mrr", "anchor_recall_at_k", "answer_accuracy",
           "provenance_recall", "n_unranked")


class CellOptions(TypedDict, total=False):
    """How every cell of a grid is scored (`srag car`'s flags, or its `--grid` file)."""

    k: int  # TCA@k's k
    split: str  # the dataset split scored
    witness: Literal["direct", "transitive"]  # which controlling documents count (`car_baselines.evaluate`)
    stage1: str | None  # a two-stage retriever's first stage
    k1: int | None  # how many documents the first stage hands on
    cache_dir: str | None  # where dense retrievers cache corpus embeddings
    rows: bool  # keep every query's row in the result


# One cell's result as `car_baselines`' `to_dict` gives it: its metrics and intervals by name (free-form here: the
# metrics are car_baselines', which this module only logs and prints).
CellResult = dict[str, Any]


def run_cell(dataset: str, retriever: str, data_dir: str | None, options: CellOptions,
             after: Any = None) -> CellResult:
    """Score one (dataset, retriever) pair; the unit of work of a grid (`after` only orders tasks). `data_dir`: the
    CAR data folder (None for a dataset shipped with the package)."""
    from car_baselines import build_retriever, evaluate, load_custom_retriever, load_dataset

    ds = load_dataset(dataset, data_dir)
    if ":" in retriever:
        model = load_custom_retriever(retriever, ds)
    else:
        model = build_retriever(retriever, ds, stage1=options.get("stage1"), k1=options.get("k1"),
                                cache_dir=options.get("cache_dir"))
    result = evaluate(ds, model, k=options["k"], split=options["split"], witness=options["witness"], name=retriever)
    return result.to_dict(rows=bool(options.get("rows")))


def run_grid(datasets: list[str], retrievers: list[str], data_dir: str | None,
             options: CellOptions) -> list[CellResult]:
    """Every cell as a Ray task (on RAY_ADDRESS, else a local instance); results in grid order."""
    from pipelines.engine.cluster import init_ray  # here: it loads srag_core, which a single cell does not need

    init_ray(None)  # before anything imports Ray: a local instance must start on loopback
    import ray

    cell = ray.remote(num_cpus=1)(run_cell)
    futures: list[Any] = []  # ObjectRefs of the cells, in grid order
    for d in datasets:
        # The dense cell embeds the corpus into the shared cache first; cells that may reuse those embeddings wait
        # for it instead of encoding the same corpus in parallel.
        first = cell.remote(d, "dense", data_dir, options) if "dense" in retrievers else None
        for r in retrievers:
            if r == "dense":
                futures.append(first)
            elif r in MAY_EMBED and first is not None:
                futures.append(cell.remote(d, r, data_dir, options, first))
            else:
                futures.append(cell.remote(d, r, data_dir, options))
    return ray.get(futures)


def log_grid(results: list[CellResult], uri: str, experiment: str, config: Mapping[str, object], runs_dir: Path
             ) -> str:
    """One parent run for the grid, one child per cell; params are the configuration, metrics the numbers. A local
    store keeps its artifacts under `runs_dir`. Returns the parent run's id."""
    from mlflow.entities import Metric, Param

    from pipelines.engine.tracking import experiment_id, mlflow_client

    client = mlflow_client(uri)  # no run links printed to stdout, which carries --json
    exp_id = experiment_id(client, uri, experiment, runs_dir)
    parent = client.create_run(exp_id, run_name="car-grid", tags={"kind": "car-grid"})
    pid = parent.info.run_id
    client.log_batch(pid, params=[Param(k, _param(v)) for k, v in config.items() if k != "rows"])
    for result in results:
        child = client.create_run(exp_id, run_name=f"{result['dataset']}/{result['retriever']}",
                                  tags={"mlflow.parentRunId": pid, "kind": "car-cell"})
        params = {"dataset": result["dataset"], "retriever": result["retriever"], "k": result["k"],
                  "split": result["split"], "witness": result["witness"], "n": result["n"],
                  "stage1": config.get("stage1"), "k1": config.get("k1")}
        client.log_batch(child.info.run_id, params=[Param(k, _param(v)) for k, v in params.items()],
                         metrics=[Metric(k, float(v), 0, 0) for k, v in _metrics(result).items()])
        client.set_terminated(child.info.run_id)
    client.log_text(pid, grid_table(results), "car_grid.txt")
    client.set_terminated(pid)
    return pid


def _metrics(result: CellResult) -> dict[str, float]:
    out = {k: result[k] for k in METRICS if result.get(k) is not None}
    out["tca_ci95_low"], out["tca_ci95_high"] = result["tca_ci95"]
    out["recall_ci95_low"], out["recall_ci95_high"] = result["recall_ci95"]
    for hop, cell in result.get("tca_by_hop", {}).items():
        out[f"tca_{hop}"] = cell["tca"]
    return out


def _param(value: object) -> str:
    return "" if value is None else str(value)


def grid_table(results: list[CellResult]) -> str:
    """The grid as a text table, one line per cell (printed by `srag car` and logged as `car_grid.txt`). The interval
    is TCA@k's; Recall@k has none here."""
    head = f"{'dataset':<24} {'retriever':<15} {'n':>5} {'TCA@k':>6} {'TCA 95% CI':>15} {'R@k':>6} {'MRR':>6} " \
           f"{'mean rank':>9} {'median':>7}"
    lines = [head, "-" * len(head)]
    for r in results:
        lo, hi = r["tca_ci95"]
        lines.append(f"{r['dataset']:<24} {r['retriever']:<15} {r['n']:>5} {r['tca_at_k']:>6.3f} "
                     f"{f'[{lo:.3f}, {hi:.3f}]':>15} {r['recall_at_k']:>6.3f} {r['mrr']:>6.3f} "
                     f"{num(r['mean_rank']):>9} {num(r['median_rank']):>7}")
    return "\n".join(lines)


def num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
