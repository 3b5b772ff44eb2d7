"""`srag submit`, `srag status`, `srag logs`: run a sweep on a Ray cluster as a Ray Job.

`srag submit SWEEP.yaml --address http://HEAD:8265` ships the files git tracks in this checkout (`git ls-files`: never
untracked files such as `.env` or private configs, nor the virtualenv, caches, run folders or git history) as the
job's working directory, with the sweep file copied into it (`--dry-run` lists exactly that and submits nothing), and
runs
`python -m pipelines.cli sweep ... --runs-dir RUNS --json` there. The job's driver connects to the cluster it runs on,
so its episodes spread over every node; it writes the same run folders and MLflow runs as a local `srag sweep`.

Where results go must be the same for the cluster and for you: `--runs-dir` is sent as an absolute path, which on a
real cluster must be a shared filesystem mounted at the same path everywhere, and `MLFLOW_TRACKING_URI` (from
`--tracking-uri` or your environment) should be the team's MLflow server.

API keys are never shipped: a job's runtime environment is readable by anyone who can open the cluster's dashboard,
so the nodes must hold the key in their own environment (see infra/ray/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from pipelines.cli import (
    CliError,
    add_command,
    add_json,
    add_pool_options,
    add_runs_dir,
    non_negative_usd,
    positive_int,
)
from pipelines.config import PROFILE_HELP, load_sweep
from pipelines.engine.store import check_run_id, git_revision
from srag_core import utc_now

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBMITTED_DIR = "_submitted"  # where the sweep file sits inside the job's working directory
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}
ADDRESS_ENV = "RAY_API_SERVER_ADDRESS"  # Ray's own name for the Jobs API address (RAY_ADDRESS is the cluster's GCS)
POLL_S = 2.0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "submit", "submit a sweep to a Ray cluster as a Ray Job", """
        Run a sweep on a Ray cluster as a Ray Job: the files git tracks in this checkout (never untracked ones such
        as .env, nor the virtualenv, caches, run folders or git history) are shipped as the job's working directory
        with the sweep file inside, and the job runs srag sweep there with the options given here, so its episodes
        spread over every node. Results go to --runs-dir, which on a real cluster must be a shared filesystem
        mounted at the same path everywhere, and to the MLflow server of --tracking-uri. API keys are never
        shipped: the nodes hold them in their own environment. Follow the job with srag status and srag logs.

        --resume SWEEP_ID submits the job that finishes a sweep whose driver died (a head node that restarted, a job
        that was stopped): it needs no sweep file, only the sweep's folder under --runs-dir.""", [
        "srag submit configs/quickstart.yaml --dry-run",
        "srag submit sweep.yaml --address http://head:8265 --runs-dir /shared/runs --limit 50 --max-cost 20",
        "srag submit sweep.yaml --runs-dir /shared/runs --tracking-uri http://mlflow:5000 --data-root /shared/data",
        "srag submit --resume 20261204-101500-table1-a1b2 --runs-dir /shared/runs"])
    p.add_argument("sweep", nargs="?", metavar="SWEEP", help="the sweep file (YAML with name, base and grid)")
    p.add_argument("--resume", metavar="SWEEP_ID",
                   help="finish the sweep SWEEP_ID (under --runs-dir) on the cluster: srag sweep --resume as a job")
    _address(p)
    add_runs_dir(p, "where the job writes run folders, sent as an absolute path: on a real cluster a shared "
                    "filesystem mounted at the same path on every node")
    p.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking URI for the job (default: "
                                                         "$MLFLOW_TRACKING_URI)")
    job = p.add_argument_group("passed on to the job's srag sweep")
    job.add_argument("--limit", type=positive_int, metavar="N", help="run only the first N questions of every run")
    job.add_argument("--epochs", type=positive_int, metavar="K",
                     help="run every question K times in every run (limits.epochs)")
    job.add_argument("--max-cost", type=non_negative_usd, metavar="USD",
                     help="the sweep's budget over all its runs (overrides the file's max_cost_usd)")
    job.add_argument("--profile", metavar="PROFILE",
                     help=PROFILE_HELP + "; a profile file is shipped with the job")
    job.add_argument("--data-root", type=Path, metavar="DIR",  # checked by the job's sweep, where it is
                     help="folder of the staged benchmark files on the cluster's nodes (default: their "
                          "$SRAG_DATA_DIR)")
    add_pool_options(job)
    job.add_argument("--force", action="store_true",
                     help="with --resume: go on even when the options given change what the runs' fingerprint "
                          "covers (runs not started yet take the change)")
    p.add_argument("--dry-run", action="store_true", help="list the files the job would ship, submit nothing")
    add_json(p, "the job's id and state (with --dry-run: the files)")
    p.set_defaults(func=cmd_submit)

    p = add_command(sub, "status", "the state of a submitted sweep (and its sweep and run ids once finished)", """
        The state of a sweep submitted with srag submit: PENDING, RUNNING, SUCCEEDED, FAILED or STOPPED, and once
        it has finished, its sweep id and run ids with the srag report command that reads them. Exits 1 when the
        job failed or was stopped.""", [
        "srag status srag-quickstart-20261204-101500-a1b2 --address http://head:8265",
        "srag status srag-quickstart-20261204-101500-a1b2 --wait --json"])
    p.add_argument("job_id", metavar="JOB_ID", help="the job's id, as srag submit printed it")
    _address(p)
    p.add_argument("--wait", action="store_true", help="wait until the job has finished")
    add_json(p, "the job's state")
    p.set_defaults(func=cmd_status)

    p = add_command(sub, "logs", "the output of a submitted sweep", """
        The output of a sweep submitted with srag submit, as the job's driver printed it; --follow keeps printing
        until the job has finished.""", [
        "srag logs srag-quickstart-20261204-101500-a1b2 --address http://head:8265",
        "srag logs srag-quickstart-20261204-101500-a1b2 --follow"])
    p.add_argument("job_id", metavar="JOB_ID", help="the job's id, as srag submit printed it")
    _address(p)
    p.add_argument("--follow", action="store_true", help="keep printing until the job has finished")
    p.set_defaults(func=cmd_logs)


def _address(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=os.environ.get(ADDRESS_ENV), metavar="URL",
                   help=f"the Ray Jobs API of the cluster, http://HEAD:8265 (default: ${ADDRESS_ENV})")


# ---------------------------------------------------------------------------------------------------------------


def auth_headers() -> dict[str, str]:
    """Ray clusters check a bearer token by default: RAY_AUTH_TOKEN, else the token file Ray itself reads."""
    token = os.environ.get("RAY_AUTH_TOKEN")
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        token = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return {"Authorization": f"Bearer {token}"} if token else {}


def jobs_client(address: str | None):
    from ray.job_submission import JobSubmissionClient

    if not address:
        raise CliError(f"no cluster address: pass --address http://HEAD:8265 or set {ADDRESS_ENV}")
    if not re.match(r"^https?://", address):
        raise CliError(f"--address must be the Jobs API URL, like http://HEAD:8265 (got {address!r})")
    try:
        return JobSubmissionClient(address, headers=auth_headers())
    except Exception as e:  # ConnectionError, an authentication error, a version mismatch: one line for the user
        raise CliError(f"cannot reach the Ray Jobs API at {address}: {_first_line(e)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def shipped_files(repo: Path = REPO_ROOT) -> list[str]:
    """The files git tracks in the checkout (as they are in the working tree), relative to its root: what a job
    ships. Untracked files (`.env`, private configs, data) never leave the machine."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached"], capture_output=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise CliError(f"srag submit ships the files git tracks, but {repo} is not a usable git checkout "
                       f"({_first_line(e)})") from None
    names = [n.decode("utf-8", "surrogateescape") for n in out.split(b"\0") if n]
    return [n for n in names if (repo / n).is_file() or (repo / n).is_symlink()]  # deleted ones are not shipped


def stage_working_dir(sweep_file: Path | None, into: Path, files: list[str] | None = None,
                      extra: tuple[Path, ...] = ()) -> Path:
    """The tracked files of this checkout with the sweep file (and `extra` files, such as a profile file) inside, as
    the job's working directory. Relative paths in the sweep resolve against it, as they do for `srag sweep` run
    from the repository root."""
    root = into / "srag"
    for name in shipped_files() if files is None else files:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target, follow_symlinks=False)
    (root / SUBMITTED_DIR).mkdir(parents=True, exist_ok=True)
    for path in (*([sweep_file] if sweep_file else []), *extra):
        shutil.copy2(path, root / SUBMITTED_DIR / path.name)
    return root


def profile_file(args: argparse.Namespace) -> Path | None:
    """--profile when it names a file here: it is shipped with the job, which cannot read this machine's files."""
    return Path(args.profile) if args.profile and Path(args.profile).is_file() else None


def sweep_options(args: argparse.Namespace) -> list[str]:
    """The options of `srag submit` that the job's `srag sweep` takes, as its command line gives them."""
    profile = profile_file(args)
    given = {"--limit": args.limit, "--epochs": args.epochs, "--max-cost": args.max_cost,
             "--profile": f"{SUBMITTED_DIR}/{profile.name}" if profile else args.profile, "--data-root": args.data_root,
             "--concurrency": args.concurrency, "--max-runs": args.max_runs}
    options = [part for flag, value in given.items() if value is not None for part in (flag, str(value))]
    return options + (["--force"] if args.force else [])


def entrypoint(sweep_name: str | None, runs_dir: Path, options: Sequence[str] = (), resume: str | None = None) -> str:
    target = ["--resume", resume] if resume else [f"{SUBMITTED_DIR}/{sweep_name}"]
    argv = ["python", "-m", "pipelines.cli", "sweep", *target, "--runs-dir", str(runs_dir), "--json", *options]
    return shlex.join(argv)


def job_env(tracking_uri: str | None, revision: str | None) -> dict[str, str]:
    # The sweep's driver calls ray.init with a runtime env of its own (pipelines.engine.cluster.init_ray); Ray
    # refuses to merge it with the job's unless told to, and then the driver's settings win where both set a variable.
    env = {"RAY_OVERRIDE_JOB_RUNTIME_ENV": "1"}
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    if revision:  # the shipped copy has no .git: runs on the cluster record the submitter's revision instead
        env["SRAG_GIT_REVISION"] = revision
    return env


def submission_id(sweep_name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", sweep_name.lower()).strip("-")[:40] or "sweep"
    return f"srag-{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def cmd_submit(args: argparse.Namespace) -> int:
    from pipelines.cli.sweep import sweep_runs

    if args.resume:
        return _submit_resume(args)
    if not args.sweep:
        raise CliError("give a sweep file, or --resume SWEEP_ID")
    sweep_file = Path(args.sweep)
    if not sweep_file.is_file():
        raise FileNotFoundError(f"sweep file not found: {sweep_file}")
    sweep = load_sweep(sweep_file)
    sweep_runs(args)  # a config error (the options' too) shows here, not minutes later in the job's log
    files = shipped_files()
    extra = (profile,) if (profile := profile_file(args)) else ()
    if args.dry_run:
        shipped = files + [f"{SUBMITTED_DIR}/{path.name}" for path in (sweep_file, *extra)]
        print(json.dumps({"files": shipped, "n_files": len(shipped)}) if args.json else "\n".join(shipped))
        return 0
    return _submit(args, sweep.name, entrypoint(sweep_file.name, _runs_dir(args), sweep_options(args)),
                   lambda tmp: stage_working_dir(sweep_file, tmp, files, extra),
                   {"srag_sweep": sweep.name, "srag_sweep_file": str(sweep_file)})


def _submit_resume(args: argparse.Namespace) -> int:
    """`srag submit --resume SWEEP_ID`: the job runs `srag sweep --resume` on the sweep's folder under --runs-dir,
    which the cluster's nodes share; the sweep must be readable from here to say what it is."""
    from pipelines.engine.store import read_sweep

    if args.sweep:
        raise CliError("--resume takes the sweep from its folder under --runs-dir: give no sweep file")
    sweep_dir = args.runs_dir / "sweeps" / check_run_id(args.resume)
    name = read_sweep(sweep_dir).name if (sweep_dir / "sweep.json").is_file() else args.resume
    files = shipped_files()
    extra = (profile,) if (profile := profile_file(args)) else ()
    if args.dry_run:
        shipped = files + [f"{SUBMITTED_DIR}/{path.name}" for path in extra]
        print(json.dumps({"files": shipped, "n_files": len(shipped)}) if args.json else "\n".join(shipped))
        return 0
    return _submit(args, name, entrypoint(None, _runs_dir(args), sweep_options(args), resume=args.resume),
                   lambda tmp: stage_working_dir(None, tmp, files, extra),
                   {"srag_sweep": name, "srag_resumes": args.resume})


def _runs_dir(args: argparse.Namespace) -> Path:
    return args.runs_dir.expanduser().resolve()


def _submit(args: argparse.Namespace, name: str, command: str, stage, metadata: dict[str, str]) -> int:
    """Submit `command` as a Ray Job with the working directory `stage(tmp)` makes; print its id."""
    client = jobs_client(args.address)
    runs_dir = _runs_dir(args)
    tracking_uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    revision = git_revision()
    with tempfile.TemporaryDirectory(prefix="srag-submit-") as tmp:
        working_dir = stage(Path(tmp))
        try:
            job_id = client.submit_job(
                entrypoint=command, submission_id=submission_id(name),
                runtime_env={"working_dir": str(working_dir), "env_vars": job_env(tracking_uri, revision)},
                metadata={**metadata, "srag_runs_dir": str(runs_dir), "srag_submitted": utc_now(),
                          # the shipped copy has no .git, so the runs cannot tell which revision they ran
                          "srag_git_revision": str(revision)})
        except RuntimeError as e:  # the Jobs API's own refusal (a working dir over Ray's size cap, ...)
            raise CliError(f"the cluster refused the job: {_first_line(e)}") from None
    out = {"job_id": job_id, "address": args.address, "status": str(client.get_job_status(job_id).value),
           "sweep": name, "runs_dir": str(runs_dir)}
    if args.json:
        print(json.dumps(out))
    else:
        print(job_id)
        print(f"follow it with: srag status {job_id} --address {args.address}  ·  srag logs {job_id} --follow "
              f"--address {args.address}", file=sys.stderr)
    if not tracking_uri:
        print(f"note: no MLFLOW_TRACKING_URI: the job logs to sqlite under {runs_dir}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------------------------


def job_state(client, job_id: str) -> dict[str, Any]:
    try:
        info = client.get_job_info(job_id)
    except RuntimeError as e:  # the Jobs API answers 404 for an unknown id
        raise CliError(f"job {job_id}: {_first_line(e)}") from None
    status = str(info.status.value)
    meta = info.metadata or {}
    out: dict[str, Any] = {"job_id": job_id, "status": status, "message": info.message,
                           "sweep": meta.get("srag_sweep"), "runs_dir": meta.get("srag_runs_dir"),
                           "git_revision": meta.get("srag_git_revision")}
    if status in TERMINAL:
        out.update(sweep_result(client.get_job_logs(job_id)))
    return out


def sweep_result(logs: str) -> dict[str, Any]:
    """The sweep's `--json` line from the job's output: its id and its runs ({} before it printed one). A job's log
    holds whatever its driver printed on stdout and stderr: the sweep's progress, Ray's lines, a library's JSON. Only
    a line that is one whole JSON object of the shape `srag sweep --json` prints (`sweep_line`) is read, the last
    one; `srag sweep --json` writes it as one write, so no other line lands inside it."""
    for line in reversed(logs.splitlines()):
        if (data := sweep_line(line)) is not None:
            runs = [{k: r.get(k) for k in ("run_id", "label", "n_questions", "complete", "failed", "pending",
                                            "missing", "accuracy")}
                    for r in data["runs"]]
            return {"sweep_id": data["sweep_id"], "run_ids": [r["run_id"] for r in runs], "runs": runs}
    return {}


def sweep_line(line: str) -> dict[str, Any] | None:
    """`line` read as the summary `srag sweep --json` prints (a sweep id and name, its runs each with a run id), or
    None when it is anything else."""
    if not (line.startswith("{") and line.rstrip().endswith("}")):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("sweep_id"), str) or not isinstance(data.get("name"), str):
        return None
    runs = data.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("run_id"), str) for r in runs):
        return None
    return data


def cmd_status(args: argparse.Namespace) -> int:
    client = jobs_client(args.address)
    state = job_state(client, args.job_id)
    while args.wait and state["status"] not in TERMINAL:
        time.sleep(POLL_S)
        state = job_state(client, args.job_id)
    if args.json:
        print(json.dumps(state, default=str))
    else:
        print(f"job {state['job_id']} ({state['sweep']}): {state['status']}"
              + (f"  {state['message']}" if state.get("message") else ""))
        if state.get("sweep_id"):
            print(f"sweep {state['sweep_id']} in {state['runs_dir']}: runs {', '.join(state['run_ids'])}")
            print(f"  srag report {state['sweep_id']} --runs-dir {state['runs_dir']}")
    return 1 if state["status"] in ("FAILED", "STOPPED") else 0


def cmd_logs(args: argparse.Namespace) -> int:
    client = jobs_client(args.address)
    job_state(client, args.job_id)  # an unknown id is a one-line error, not a traceback
    if not args.follow:
        print(client.get_job_logs(args.job_id), end="")
        return 0

    async def follow() -> None:
        async for chunk in client.tail_job_logs(args.job_id):
            print(chunk, end="", flush=True)

    asyncio.run(follow())
    return 0
