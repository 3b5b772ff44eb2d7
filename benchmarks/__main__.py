"""Every benchmark at its smallest size, so a rename breaks the build rather than the next measurement.

    .venv/bin/python -m benchmarks [NAME ...] [--checkout-only] [--list]      (make bench-smoke)

Each module of this folder, except the helpers (names starting with `_`), is run as `python -m benchmarks.NAME
--smoke` in a process of its own, one after the other; a module added to the folder is run without being listed
anywhere. Every benchmark takes `--smoke`: its smallest size, which still goes through the code it measures (those
on Ray take 10 to 20 s on an idle machine of 2 cores). A module says what it needs besides the checkout in a
module-level `SMOKE_NEEDS` tuple (read from its source, not imported): "data" (the staged benchmarks under the data
root: ../shared/data beside the checkout, or SRAG_DATA_DIR), "local_model" (the llama.cpp server and its model, which
`make install` sets up) or "encoder" (the sentence encoder); none means the checkout alone. `--checkout-only` runs
only the modules that need nothing more. `.ci/run` runs them all, after `make check-data`.

One line per module (ok or FAILED, its seconds); a failed module's last output lines follow its line; the last line
names every module that failed, and the exit status is 1 if any did.
"""

from __future__ import annotations

import argparse
import ast
import os
import pkgutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

FOLDER = Path(__file__).resolve().parent
NEEDS = ("data", "local_model", "encoder")
TAIL_LINES = 25


@dataclass
class Outcome:
    name: str
    needs: tuple[str, ...] = ()
    ok: bool = False
    seconds: float = 0.0
    why: str = ""  # one line: why it failed
    tail: list[str] = field(default_factory=list)  # its last output lines, when it failed


def modules(folder: Path = FOLDER) -> list[str]:
    """The benchmark modules of `folder`, by name: every module but the helpers (`_x`)."""
    return sorted(m.name for m in pkgutil.iter_modules([str(folder)]) if not m.name.startswith("_"))


def declared_needs(path: Path) -> tuple[str, ...]:
    """The module's `SMOKE_NEEDS`, read from its source (a benchmark's imports may need what the run lacks); a
    ValueError names what is wrong with it."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        named = isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SMOKE_NEEDS"
                                                     for t in node.targets)
        if named:
            needs = ast.literal_eval(node.value)
            if not isinstance(needs, tuple) or not set(needs) <= set(NEEDS):
                raise ValueError(f"SMOKE_NEEDS must be a tuple of {', '.join(map(repr, NEEDS))}; it is {needs!r}")
            return needs
    return ()


def static_problem(path: Path) -> str | None:
    """Why the module cannot be smoke-run, found without running it (no `--smoke` option, a bad SMOKE_NEEDS)."""
    if '"--smoke"' not in path.read_text(encoding="utf-8"):
        return "it has no --smoke option: add one that runs its smallest size"
    try:
        declared_needs(path)
    except (ValueError, SyntaxError) as e:
        return str(e)
    return None


def run_one(name: str, package: str, folder: Path, cwd: Path, timeout_s: float) -> Outcome:
    path = folder / f"{name}.py"
    outcome = Outcome(name)
    if (problem := static_problem(path)) is not None:
        outcome.why = problem
        return outcome
    outcome.needs = declared_needs(path)
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", f"{package}.{name}", "--smoke"], cwd=cwd, capture_output=True,
                              text=True, timeout=timeout_s, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired as e:
        outcome.seconds = time.monotonic() - started
        outcome.why = f"still running after {timeout_s:g} s"
        outcome.tail = _tail((e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace"))
        return outcome
    outcome.seconds = time.monotonic() - started
    outcome.ok = done.returncode == 0
    if not outcome.ok:
        outcome.tail = _tail(done.stdout + done.stderr)
        last = next((line for line in reversed(outcome.tail) if line.strip()), "no output")
        outcome.why = f"exit status {done.returncode}: {last.strip()[:200]}"
    return outcome


def _tail(text: str) -> list[str]:
    return text.splitlines()[-TAIL_LINES:]


def report(outcome: Outcome) -> str:
    needs = f" (needs {', '.join(outcome.needs)})" if outcome.needs else ""
    if outcome.ok:
        return f"ok      {outcome.name}{needs}: {outcome.seconds:.1f} s"
    lines = [f"FAILED  {outcome.name}{needs}: {outcome.why}" + (f", after {outcome.seconds:.1f} s"
                                                                 if outcome.seconds else "")]
    return "\n".join(lines + [f"        | {line}" for line in outcome.tail])


def main(argv: list[str] | None = None, *, package: str = "benchmarks", folder: Path = FOLDER,
         cwd: Path | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME", help="only these benchmarks (default: every one)")
    ap.add_argument("--checkout-only", action="store_true",
                    help="only the benchmarks that need nothing beside the checkout (no SMOKE_NEEDS)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark (default 900)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and what each needs, run nothing")
    args = ap.parse_args(argv)
    found = modules(folder)
    if unknown := sorted(set(args.names) - set(found)):
        print(f"no benchmark named {', '.join(unknown)} in {folder}; there are {', '.join(found)}", file=sys.stderr)
        return 2
    names = args.names or found
    if args.checkout_only:
        names = [n for n in names if static_problem(folder / f"{n}.py") is not None
                 or not declared_needs(folder / f"{n}.py")]
    if args.list:
        for name in names:
            problem = static_problem(folder / f"{name}.py")
            needs = ", ".join(declared_needs(folder / f"{name}.py")) if problem is None else f"cannot run: {problem}"
            print(f"{name}: {needs or 'the checkout only'}")
        return 0
    started, outcomes = time.monotonic(), []
    for name in names:
        outcomes.append(run_one(name, package, folder, cwd or folder.parent, args.timeout))
        print(report(outcomes[-1]), flush=True)
    failed = [o.name for o in outcomes if not o.ok]
    print(f"{len(outcomes)} benchmarks at their smallest size in {time.monotonic() - started:.0f} s: "
          + (f"{len(failed)} failed: {', '.join(failed)}" if failed else "all ran"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
