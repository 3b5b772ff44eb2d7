"""`srag car`: score CAR baseline retrievers on the CAR benchmarks (TCA@k and companions).

One dataset and one retriever run in-process and print one result. Several (comma-separated, or `all`) form a grid:
each cell is a Ray task (a local Ray instance unless RAY_ADDRESS names a cluster), and the grid is logged to MLflow
as a parent run with one child run per cell before the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXPERIMENT = "car-baselines"
SPLITS = ("all", "train", "dev", "test")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("car", help="score CAR baselines (TCA@k) on the CAR benchmarks; a grid runs on Ray + MLflow")
    p.add_argument("--dataset", required=True, help="dataset name, comma-separated names, or 'all'")
    p.add_argument("--retriever", required=True,
                   help="retriever name, comma-separated names, 'all', or module:Class for a custom retriever")
    p.add_argument("--k", type=int, default=5, help="cutoff for TCA@k and Recall@k (default 5)")
    p.add_argument("--split", default="all", choices=SPLITS, help="FinSuperQA split (default all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--data-dir", type=Path, help="CAR data folder (default: $CAR_DATA_DIR or the shared data)")
    p.add_argument("--stage1", choices=("bm25", "tfidf", "dense"),
                   help="first stage of two_stage/dense_rerank/regex_ner (default: the dataset's published choice)")
    p.add_argument("--k1", type=int, help="first-stage results that anchor the entity lookup (default per dataset)")
    p.add_argument("--witness", default="direct", choices=("direct", "transitive"),
                   help="what may witness a superseded document: a direct superseder (published) or any")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache/car"), help="embedding cache (default .cache/car)")
    p.add_argument("--rows", action="store_true", help="with --json: include the per-example rows")
    p.add_argument("--tracking-uri", help="MLflow tracking URI for a grid (default $MLFLOW_TRACKING_URI or runs/)")
    p.add_argument("--experiment", default=EXPERIMENT, help=f"MLflow experiment for a grid (default {EXPERIMENT})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from car_baselines import default_data_dir

    data_dir = (args.data_dir or default_data_dir()).resolve()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"CAR data folder not found: {data_dir}")
    if args.k <= 0:
        raise ValueError(f"--k must be a positive integer; got {args.k}")
    if args.k1 is not None and args.k1 <= 0:
        raise ValueError(f"--k1 must be a positive integer; got {args.k1}")
    datasets, skipped = _datasets(args.dataset, data_dir)
    retrievers = _retrievers(args.retriever)
    options = {"k": args.k, "split": args.split, "witness": args.witness, "stage1": args.stage1, "k1": args.k1,
               "cache_dir": str(args.cache_dir.resolve()), "rows": args.rows}
    for name in skipped:
        print(f"srag car: note: skipping {name} (its data file is not in {data_dir})", file=sys.stderr)
    if len(datasets) == 1 and len(retrievers) == 1:
        result = run_cell(datasets[0], retrievers[0], str(data_dir), options)
        print(json.dumps(result, default=_plain) if args.json else _describe(result))
        return 0
    results = run_grid(datasets, retrievers, str(data_dir), options)
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or _local_store()
    parent = log_grid(results, uri, args.experiment, {**options, "datasets": ",".join(datasets),
                                                      "retrievers": ",".join(retrievers)})
    table = format_table(results)
    if args.json:
        print(json.dumps({"parent_run_id": parent, "tracking_uri": uri, "results": results}, default=_plain))
    else:
        print(table)
        print(f"\nLogged to MLflow {uri}: parent run {parent} with {len(results)} child runs.")
    return 0


def _datasets(spec: str, data_dir: Path) -> tuple[list[str], list[str]]:
    from car_baselines import dataset_available, dataset_names

    names = _names(spec, dataset_names(), "dataset")
    if spec.strip() == "all":
        present = [n for n in names if dataset_available(n, data_dir)]
        if not present:
            raise FileNotFoundError(f"no CAR dataset files found in {data_dir}")
        return present, [n for n in names if n not in present]
    return names, []


def _retrievers(spec: str) -> list[str]:
    from car_baselines import RETRIEVER_NAMES

    if ":" in spec and "," not in spec:
        return [spec]  # module:Class, loaded when the cell runs
    return _names(spec, list(RETRIEVER_NAMES), "retriever")


def _names(spec: str, known: list[str], kind: str) -> list[str]:
    if spec.strip() == "all":
        return list(known)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"--{kind} needs a name")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {kind} {name!r}; choose from {', '.join(known)}, or all")
    return list(dict.fromkeys(names))


def run_cell(dataset: str, retriever: str, data_dir: str, options: dict[str, Any], after: Any = None) -> dict[str, Any]:
    """Score one (dataset, retriever) pair; the unit of work of a grid (`after` only orders tasks)."""
    from car_baselines import build_retriever, evaluate, load_custom_retriever, load_dataset

    ds = load_dataset(dataset, data_dir)
    if ":" in retriever:
        model = load_custom_retriever(retriever, ds)
    else:
        model = build_retriever(retriever, ds, stage1=options.get("stage1"), k1=options.get("k1"),
                                cache_dir=options.get("cache_dir"))
    result = evaluate(ds, model, k=options["k"], split=options["split"], witness=options["witness"], name=retriever)
    return result.to_dict(rows=bool(options.get("rows")))


def run_grid(datasets: list[str], retrievers: list[str], data_dir: str, options: dict[str, Any]) -> list[dict]:
    """Every cell as a Ray task; results come back in grid order."""
    import ray

    from pipelines.engine.ray_utils import init_ray

    init_ray(None)  # RAY_ADDRESS, or a local instance
    cell = ray.remote(num_cpus=1)(run_cell)
    futures = []
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


MAY_EMBED = ("dense_rerank", "two_stage", "two_stage_rssg", "regex_ner")


def _local_store() -> str:
    runs = REPO / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{runs / 'mlflow.db'}"


METRICS = ("tca_at_k", "recall_at_k", "mean_rank", "median_rank", "mrr", "anchor_recall_at_k", "answer_accuracy",
           "provenance_recall", "n_unranked")


def log_grid(results: list[dict], tracking_uri: str, experiment: str, config: dict[str, Any]) -> str:
    """One parent run for the grid, one child per cell; params are the configuration, metrics the numbers."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    exp_id = exp.experiment_id if exp else client.create_experiment(experiment, _artifact_root(tracking_uri))
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
    client.log_text(pid, format_table(results), "car_grid.txt")
    client.set_terminated(pid)
    return pid


def _metrics(result: dict) -> dict[str, float]:
    out = {k: result[k] for k in METRICS if result.get(k) is not None}
    out["tca_ci95_low"], out["tca_ci95_high"] = result["tca_ci95"]
    for hop, cell in result.get("tca_by_hop", {}).items():
        out[f"tca_{hop}"] = cell["tca"]
    return out


def _artifact_root(uri: str) -> str | None:
    """Keep artifacts next to a local store instead of in the working directory."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").resolve().as_uri()
    return None


def _param(value: Any) -> str:
    return "" if value is None else str(value)


def format_table(results: list[dict]) -> str:
    head = f"{'dataset':<24} {'retriever':<15} {'n':>5} {'TCA@k':>6} {'95% CI':>15} {'R@k':>6} {'MRR':>6} " \
           f"{'mean rank':>9} {'median':>7}"
    lines = [head, "-" * len(head)]
    for r in results:
        lo, hi = r["tca_ci95"]
        lines.append(f"{r['dataset']:<24} {r['retriever']:<15} {r['n']:>5} {r['tca_at_k']:>6.3f} "
                     f"{f'[{lo:.3f}, {hi:.3f}]':>15} {r['recall_at_k']:>6.3f} {r['mrr']:>6.3f} "
                     f"{_num(r['mean_rank']):>9} {_num(r['median_rank']):>7}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _describe(r: dict) -> str:
    lo, hi = r["tca_ci95"]
    lines = [f"{r['dataset']} / {r['retriever']}  (n={r['n']}, k={r['k']}, split={r['split']})",
             f"  TCA@{r['k']}        {r['tca_at_k']:.3f}  95% CI [{lo:.3f}, {hi:.3f}]",
             f"  Recall@{r['k']}     {r['recall_at_k']:.3f}",
             f"  anchor R@{r['k']}   {r['anchor_recall_at_k']:.3f}",
             f"  MRR          {r['mrr']:.3f}",
             f"  rank of the controlling document: mean {_num(r['mean_rank'])}, median {_num(r['median_rank'])}"]
    if r.get("answer_accuracy") is not None:
        lines.append(f"  answer acc.  {r['answer_accuracy']:.3f}")
    if r.get("provenance_recall") is not None:
        lines.append(f"  prov. recall {r['provenance_recall']:.3f}")
    for hop, cell in r.get("tca_by_hop", {}).items():
        lines.append(f"  TCA {hop:<8} {cell['tca']:.3f}  (n={cell['n']})")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
