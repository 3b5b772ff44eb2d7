"""`srag car`: score CAR baseline retrievers on the CAR benchmarks (TCA@k and companions).

One dataset and one retriever run in-process and print one result. Several (comma-separated, or `all`) form a grid:
`pipelines.engine.car` runs each cell as a Ray task (a local Ray instance unless RAY_ADDRESS names a cluster)
and logs the grid to MLflow as a parent run with one child run per cell; this module parses, calls it and prints.
`--grid FILE` reads the grid from YAML (`configs/car_grid.yaml`): the flags' names as keys, the flags given beside it
winning.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from pipelines import paths
from pipelines.cli import CliError, Renamed, add_cache_dir, add_command, add_data_root, add_json, add_runs_dir

EXPERIMENT = "car-baselines"
Split = Literal["all", "train", "dev", "test"]
Witness = Literal["direct", "transitive"]
Stage1 = Literal["bm25", "tfidf", "dense"]
SPLITS = get_args(Split)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "car", "score CAR baselines (TCA@k) on the CAR benchmarks; a grid runs on Ray + MLflow", """
        Score Controlling Authority Retrieval baselines on the CAR benchmarks: TCA@k, Recall@k and their
        companions, with 95% intervals. One dataset and one retriever run here and print one result; several
        (comma-separated, or all) form a grid whose cells run as Ray tasks and are logged to MLflow as a parent run
        with one child per cell. --grid FILE reads the grid from YAML (its keys are these flags; flags given beside
        it win). The CAR files are read from the car/ folder of the data root, or from $CAR_DATA_DIR; the shipped
        legal-real-sample needs neither.""", [
        "srag car --dataset legal-real-sample --retriever oracle",
        "srag car --dataset finsuperqa --retriever bm25,two_stage --data-root /data/srag",
        "srag car --grid configs/car_grid.yaml --k 10 --json"])
    p.add_argument("--dataset", metavar="NAMES", help="dataset name, comma-separated names, or 'all'")
    p.add_argument("--retriever", metavar="NAMES",
                   help="retriever name, comma-separated names, 'all', or module:Class for a custom retriever")
    p.add_argument("--grid", type=Path, metavar="FILE",
                   help="a YAML file with these flags as keys (dataset and retriever may be lists); flags win")
    p.add_argument("--k", type=int, help="cutoff for TCA@k and Recall@k (default 5)")
    p.add_argument("--split", choices=SPLITS, help="FinSuperQA split (default all)")
    add_json(p)
    add_data_root(p, "the staged benchmark files, the CAR files in its car/ folder")
    p.add_argument("--data-dir", dest="car_dir", type=Path, action=Renamed,
                   new="--data-root DIR (the CAR files in DIR/car), or set CAR_DATA_DIR to the CAR files' folder")
    p.add_argument("--stage1", choices=get_args(Stage1),
                   help="first stage of two_stage/dense_rerank/regex_ner (default: the dataset's published choice)")
    p.add_argument("--k1", type=int, help="first-stage results that anchor the entity lookup (default per dataset)")
    p.add_argument("--witness", choices=get_args(Witness),
                   help="what may witness a superseded document: a direct superseder (published) or any")
    add_cache_dir(p, "corpus embeddings", "car")
    p.add_argument("--rows", action="store_true", help="with --json: include the per-example rows")
    p.add_argument("--tracking-uri", metavar="URI",
                   help="MLflow tracking URI for a grid (default: $MLFLOW_TRACKING_URI, else mlflow.db in --runs-dir)")
    add_runs_dir(p, "where a grid's local MLflow store lives")
    p.add_argument("--experiment", default=EXPERIMENT, help=f"MLflow experiment for a grid (default {EXPERIMENT})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.engine.car import CellOptions, grid_table, log_grid, run_cell, run_grid
    from pipelines.engine.tracking import tracking_uri

    with_grid_file(args)
    if args.k <= 0:
        raise CliError(f"--k must be a positive integer; got {args.k}")
    if args.k1 is not None and args.k1 <= 0:
        raise CliError(f"--k1 must be a positive integer; got {args.k1}")
    datasets, skipped, data_dir = _datasets(args)
    retrievers = _retrievers(args.retriever)
    cache_dir = args.cache_dir or paths.cache_dir() / "car"
    options = CellOptions(k=args.k, split=args.split, witness=args.witness, stage1=args.stage1, k1=args.k1,
                          cache_dir=str(cache_dir.resolve()), rows=args.rows)
    for name in skipped:
        print(f"srag car: note: skipping {name} (its data file is not in {data_dir})", file=sys.stderr)
    folder = str(data_dir) if data_dir is not None else None
    if len(datasets) == 1 and len(retrievers) == 1:
        result = run_cell(datasets[0], retrievers[0], folder, options)
        print(json.dumps(result, default=_plain) if args.json else _describe(result))
        return 0
    results = run_grid(datasets, retrievers, folder, options)
    uri = tracking_uri(args.tracking_uri, args.runs_dir)
    parent = log_grid(results, uri, args.experiment, {**options, "datasets": ",".join(datasets),
                                                      "retrievers": ",".join(retrievers)}, args.runs_dir)
    if args.json:
        print(json.dumps({"parent_run_id": parent, "tracking_uri": uri, "results": results}, default=_plain))
    else:
        print(grid_table(results))
        print(f"\nLogged to MLflow {uri}: parent run {parent} with {len(results)} child runs.")
    return 0


class GridFile(BaseModel):
    """`--grid FILE`: what the flags of a grid say, in YAML."""

    model_config = ConfigDict(extra="forbid")

    dataset: str | list[str] | None = None
    retriever: str | list[str] | None = None
    k: int | None = None
    split: Split | None = None
    witness: Witness | None = None
    stage1: Stage1 | None = None
    k1: int | None = None


DEFAULTS = {"k": 5, "split": "all", "witness": "direct"}


def with_grid_file(args: argparse.Namespace) -> None:
    """Fill the options no flag gave from `--grid FILE`, then from the defaults; a dataset and a retriever are
    needed from one or the other."""
    from pipelines.config import ConfigError, describe, read_yaml, wrong_kind

    grid = {}
    if args.grid is not None:
        data = read_yaml(args.grid)
        wrong_kind(args.grid, data, "CAR grid")
        try:
            grid = GridFile.model_validate(data).model_dump(exclude_none=True)
        except ValidationError as e:
            raise ConfigError(describe(e, str(args.grid), GridFile)) from None
    for key in GridFile.model_fields:
        if getattr(args, key) is None:
            value = grid.get(key, DEFAULTS.get(key))
            setattr(args, key, ",".join(value) if isinstance(value, list) else value)
    if args.dataset is None or args.retriever is None:
        raise CliError("give --dataset and --retriever, or a --grid file that names them")


def _datasets(args: argparse.Namespace) -> tuple[list[str], list[str], Path | None]:
    """The datasets to score, those of `all` skipped for want of their files, and the CAR data folder (None when
    every dataset asked for is shipped with the package)."""
    from car_baselines import DATASETS, dataset_available, dataset_names

    names = _names(args.dataset, dataset_names(), "dataset")
    everything = args.dataset.strip() == "all"
    needed = [n for n in names if not DATASETS[n].shipped]
    needed_by = "the CAR datasets" if everything else f"CAR dataset {', '.join(needed)}"
    data_dir = _data_dir(args, needed_by) if needed else None
    if not everything:
        return names, [], data_dir
    present = [n for n in names if dataset_available(n, data_dir)]
    return present, [n for n in names if n not in present], data_dir


def _data_dir(args: argparse.Namespace, needed_by: str) -> Path:
    """The CAR files' folder: --data-dir (deprecated), else $CAR_DATA_DIR, else car/ under the data root."""
    from car_baselines import default_data_dir

    how = (f"pass --data-root DIR or set {paths.DATA_ENV} (the CAR files in its car/ folder), or set CAR_DATA_DIR to "
           "the CAR files' folder; legal-real-sample is shipped and needs none")
    folder = args.car_dir or default_data_dir() or paths.require_data_root(args.data_root, needed_by, how) / "car"
    if not folder.is_dir():
        raise FileNotFoundError(f"CAR data folder not found: {folder}")
    return folder.resolve()


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
        raise CliError(f"--{kind} needs a name")
    for name in names:
        if name not in known:
            raise CliError(f"unknown {kind} {name!r}; choose from {', '.join(known)}, or all")
    return list(dict.fromkeys(names))


def _describe(r: dict) -> str:
    from pipelines.engine.car import num

    (lo, hi), (rlo, rhi) = r["tca_ci95"], r["recall_ci95"]
    lines = [f"{r['dataset']} / {r['retriever']}  (n={r['n']}, k={r['k']}, split={r['split']})",
             f"  TCA@{r['k']}        {r['tca_at_k']:.3f}  95% CI [{lo:.3f}, {hi:.3f}]",
             f"  Recall@{r['k']}     {r['recall_at_k']:.3f}  95% CI [{rlo:.3f}, {rhi:.3f}] (bootstrap)",
             f"  anchor R@{r['k']}   {r['anchor_recall_at_k']:.3f}",
             f"  MRR          {r['mrr']:.3f}",
             f"  rank of the controlling document: mean {num(r['mean_rank'])}, median {num(r['median_rank'])}"]
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
