"""Do the intervals cover what they say and do the tests keep their error rate? Every interval and test the tool
reports, on a grid of sample sizes, true accuracies (0.05 to 0.95), effects and designs, through the functions the
tool itself calls (`pipelines.engine.scoring.score_interval`, `scoring.compare`, `evalstats.paired_binary`):

- **wilson**: a run's accuracy over 0/1 scores, and each question type's (the same interval on fewer questions):
  exact coverage, summed over every count of right answers;
- **binary paired**: the difference of two runs' accuracies on 0/1 scores (`paired_binary`: exact unconditional
  below 25 discordant questions, Tango's score interval and the asymptotic McNemar test from there), exact coverage
  and size summed over every 2x2 table, and the power at the minimum detectable effect the tool reports;
- **binary paired, the issue's designs**: simulated through `compare`, beside the mid-p interval it replaced;
- **paired t**: partial scores (3 epochs reduced by their mean) compared question by question;
- **clustered**: questions in clusters of balanced and unbalanced sizes, the clusters' right answers going together
  (logit-normal cluster effects, shared by both systems, `sd_shared`, and each system's own, `sd_own`): the run's
  clustered interval (`wilson_cr2` on 0/1 scores) and the clustered paired t test (`paired_t_cr2`), with how often
  the tool refuses (too few effective clusters);
- **bca / epochs**: a run's accuracy over partial scores, each question's 3 epochs reduced by their mean.

The judge-corrected figures (issue 45) have their own benchmark, `benchmarks/judge_correction.py` (docs/judge.md).

Run: `.venv/bin/python -m benchmarks.coverage` (about 30 minutes on 2 cores) writes docs/coverage.md;
`--smoke` runs every section at its smallest size in seconds and prints the tables without writing.
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from collections.abc import Callable
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import special, stats

import evalstats
from benchmarks._scripted import markdown_table
from pipelines.engine.scoring import compare, score_interval

DOCS = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"
LEVEL = 0.95
Row = dict[str, Any]


def rows_of(scores: np.ndarray, clusters: list[str] | None = None, epochs: int = 1) -> list[dict[str, Any]]:
    """Question rows as `compare` reads them."""
    return [{"question_id": f"q{i}", "status": "ok", "outcome": "scored", "score": float(s), "epochs": epochs,
             "cluster": None if clusters is None else clusters[i]} for i, s in enumerate(scores)]


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


# ---------------------------------------------------------------------------------------------------------------
# A run's accuracy over 0/1 scores: Wilson, exact


def wilson(sizes: list[int], accuracies: list[float]) -> list[Row]:
    out = []
    for n in sizes:
        ends = np.array([score_interval([1.0] * k + [0.0] * (n - k))[0] for k in range(n + 1)])
        for p in accuracies:
            weights = stats.binom.pmf(np.arange(n + 1), n, p)
            out.append({"questions": n, "accuracy": p,
                        "coverage": float(np.sum(weights * ((ends[:, 0] <= p) & (p <= ends[:, 1]))))})
    return out


# ---------------------------------------------------------------------------------------------------------------
# The binary paired difference: exact sums over every table


@lru_cache(maxsize=None)
def _binary(b: int, c: int, n: int) -> tuple[float, float, float]:
    fit = evalstats.paired_binary(b, c, n, LEVEL)
    return fit.low, fit.high, fit.p_value


def binary_cell(n: int, p10: float, p01: float) -> tuple[float, float]:
    """Exact coverage of the difference and rejection rate at 0.05, summed over every table of probability above
    1e-10."""
    psi, delta = p10 + p01, p01 - p10
    covered = rejected = 0.0
    m = np.arange(n + 1)
    for k in m[stats.binom.pmf(m, n, psi) > 1e-10]:
        weight = stats.binom.pmf(k, n, psi)
        c = np.arange(k + 1)
        given = stats.binom.pmf(c, k, p01 / psi if psi else 0.5)
        for ci in c[given * weight > 1e-10]:
            lo, hi, p = _binary(int(k - ci), int(ci), n)
            covered += weight * given[ci] * (lo <= delta <= hi)
            rejected += weight * given[ci] * (p < 1 - LEVEL)
    return covered, rejected


def binary(sizes: list[int], accuracies: list[float], effects: list[float]) -> list[Row]:
    """A's accuracy, B's = A's + effect, and the discordance of independent errors (share 1) or of errors that go
    together (share 0.2 of it); at no effect also the exact power at the detectable effect the tool reports for the
    true discordant share."""
    out = []
    for n in sizes:
        for pa in accuracies:
            for effect in effects:
                pb = pa + effect
                if not 0 < pb < 1:
                    continue
                for share in (1.0, 0.2):
                    p10 = share * pa * (1 - pb)
                    p01 = p10 + effect
                    if p01 + p10 > 1 or p10 + p01 <= 0:
                        continue
                    coverage, rejection = binary_cell(n, p10, p01)
                    row = {"questions": n, "accuracy_a": pa, "effect": effect, "discordant": round(p10 + p01, 4),
                           "coverage": coverage, "type_i": rejection if effect == 0 else None, "power_at_mde": None,
                           "mde": None}
                    if effect == 0:
                        try:
                            mde = evalstats.min_detectable_effect_binary(n, p10 + p01)
                            row["mde"] = round(mde, 4)
                            row["power_at_mde"] = binary_cell(n, (p10 + p01 - mde) / 2, (p10 + p01 + mde) / 2)[1]
                        except ValueError:
                            pass
                    out.append(row)
    return out


def binary_designs(reps: int, rng: np.random.Generator) -> list[Row]:
    """The issue's two designs, simulated through `compare` (one call per distinct table), beside the mid-p
    interval conditional on the discordant questions that compare gave before."""
    out = []
    for name, n, p10, p01 in (("A 0.50, B 0.60, 12% discordant", 200, 0.01, 0.11),
                              ("A 0.85, B 0.90, 6% discordant", 200, 0.005, 0.055),
                              ("A 0.50, B 0.50, 12% discordant", 200, 0.06, 0.06)):
        tables = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=reps)
        cache: dict[tuple[int, int], Any] = {}
        covered = rejected = old = 0
        for b, c, _ in tables:
            if (b, c) not in cache:
                a_scores = np.r_[np.ones(b), np.zeros(c), np.ones(n - b - c)]
                b_scores = np.r_[np.zeros(b), np.ones(c), np.ones(n - b - c)]
                cache[(b, c)] = compare(rows_of(a_scores), rows_of(b_scores))
            result = cache[(b, c)]
            lo, hi = result.difference_ci95
            covered += lo <= p01 - p10 <= hi
            rejected += result.p_value is not None and result.p_value < 1 - LEVEL
            midp = evalstats.mcnemar_midp_difference_interval(int(b), int(c), n)
            old += midp is not None and midp[0] <= p01 - p10 <= midp[1]
        out.append({"design": name, "questions": n, "replications": reps, "coverage": covered / reps,
                    "rejections": rejected / reps, "mid-p interval (before)": old / reps})
    return out


# ---------------------------------------------------------------------------------------------------------------
# Simulated designs: partial scores, clusters


def _draw(rng: np.random.Generator, reps: int, sizes: list[int], accuracy: float, sd_shared: float, sd_own: float,
          shift: float = 0.0, epochs: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores of systems A and B (reps x questions) on questions in clusters of `sizes`: a cluster's chance of a
    right answer is logit^-1(logit(accuracy) + u + v), u shared by both systems (sd_shared), v each system's own
    (sd_own); B's logit is `shift` higher. With epochs, each score is the mean of that many draws."""
    g = len(sizes)
    group = np.repeat(np.arange(g), sizes)
    shared = rng.normal(0, sd_shared, (reps, g))
    scores = []
    for lift in (0.0, shift):
        chance = special.expit(special.logit(accuracy) + lift + shared + rng.normal(0, sd_own, (reps, g)))[:, group]
        scores.append(np.mean(rng.random((epochs, reps, group.size)) < chance, axis=0))
    return scores[0], scores[1], group


def _truth(accuracy: float, sd: float, shift: float = 0.0) -> float:
    """E[logit^-1(logit(accuracy) + shift + N(0, sd^2))] by Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(w * special.expit(special.logit(accuracy) + shift + sd * x)) / np.sum(w))


DESIGNS = {  # cluster sizes; the refused ones are where the clustered t test does not keep its level
    "10 x 5": [5] * 10, "20 x 5": [5] * 20, "12 x 2": [2] * 12, "41 + 9 x 1": [41] + [1] * 9,
    "30 + 11 x 2": [30] + [2] * 11, "3 x 20 + 30 x 1": [20] * 3 + [1] * 30, "50 x 1 + 5 x 10": [1] * 50 + [10] * 5,
    "40 geometric (mean 4)": list(np.random.default_rng(1).geometric(0.25, 40)), "20 + 3 x 1": [20] + [1] * 3,
    "95 + 5 x 1": [95] + [1] * 5, "200 + 10 x 1": [200] + [1] * 10,
}
CLUSTERING = [(0.0, 0.0), (1.0, 0.0), (1.0, 0.7), (2.0, 1.0)]  # (sd_shared, sd_own) on the logit scale


def clustered(reps: int, rng: np.random.Generator, designs: dict[str, list[int]], accuracies: list[float],
              clustering: list[tuple[float, float]]) -> list[Row]:
    out = []
    for name, sizes in designs.items():
        labels = [f"c{g}" for g, size in enumerate(sizes) for _ in range(size)]
        g_eff = evalstats.effective_clusters(sizes, 0.0)
        for accuracy in accuracies:
            for sd_shared, sd_own in clustering:
                a, b, _ = _draw(rng, reps, sizes, accuracy, sd_shared, sd_own)
                truth = _truth(accuracy, math.hypot(sd_shared, sd_own))
                covered = given = rejected = tested = 0
                for ra, rb in zip(a, b, strict=True):
                    ci, _ = score_interval(list(ra), clusters=labels)
                    if ci is not None:
                        given += 1
                        covered += ci[0] <= truth <= ci[1]
                    result = compare(rows_of(ra, labels), rows_of(rb, labels))
                    if result.p_value is not None:
                        tested += 1
                        rejected += result.p_value < 1 - LEVEL
                out.append({"design": name, "clusters": len(sizes), "effective": round(g_eff, 2),
                            "accuracy": accuracy, "sd_shared": sd_shared, "sd_own": sd_own,
                            "run_coverage": covered / given if given else None, "run_refused": 1 - given / reps,
                            "type_i": rejected / tested if tested else None, "test_refused": 1 - tested / reps})
    return out


def paired_t(reps: int, rng: np.random.Generator, sizes: list[int], accuracies: list[float],
             effects: list[float]) -> list[Row]:
    """Partial scores (3 epochs, mean), independent questions: coverage, size, and power at the median of the
    detectable effects the tool reported under no effect (B's logit shifted until its accuracy is that much
    higher)."""
    out = []
    for n in sizes:
        for accuracy in accuracies:
            for effect in effects:
                shift = _shift_for(accuracy, 1.0, effect)
                a, b, _ = _draw(rng, reps, [1] * n, accuracy, 1.0, 0.0, shift, epochs=3)
                truth = _truth(accuracy, 1.0, shift) - _truth(accuracy, 1.0)
                results = [compare(rows_of(ra, epochs=3), rows_of(rb, epochs=3)) for ra, rb in zip(a, b, strict=True)]
                tested = [r for r in results if r.p_value is not None]
                covered = sum(r.difference_ci95[0] <= truth <= r.difference_ci95[1] for r in tested)
                rejected = sum(r.p_value < 1 - LEVEL for r in tested)
                row = {"questions": n, "accuracy_a": accuracy, "effect": effect,
                       "coverage": covered / len(tested) if tested else None,
                       "type_i": rejected / len(tested) if tested and effect == 0 else None,
                       "power_at_mde": None, "mde": None}
                mdes = [r.min_detectable_effect for r in results if r.min_detectable_effect is not None]
                reachable = _truth(accuracy, 1.0, 10.0) - _truth(accuracy, 1.0)
                if effect == 0 and mdes and float(np.median(mdes)) < reachable:
                    mde = float(np.median(mdes))
                    shift = _shift_for(accuracy, 1.0, mde)
                    a, b, _ = _draw(rng, reps, [1] * n, accuracy, 1.0, 0.0, shift, epochs=3)
                    hits = [compare(rows_of(ra, epochs=3), rows_of(rb, epochs=3)).p_value
                            for ra, rb in zip(a, b, strict=True)]
                    row["mde"] = round(mde, 4)
                    row["power_at_mde"] = float(np.mean([p is not None and p < 1 - LEVEL for p in hits]))
                out.append(row)
    return out


def _shift_for(accuracy: float, sd: float, effect: float) -> float:
    """The logit shift that lifts the mean accuracy by `effect`."""
    from scipy import optimize

    if effect == 0:
        return 0.0
    return float(optimize.brentq(lambda s: _truth(accuracy, sd, s) - _truth(accuracy, sd) - effect, 0.0, 10.0))


def bca_epochs(reps: int, rng: np.random.Generator, sizes: list[int], accuracies: list[float]) -> list[Row]:
    """A run's accuracy over partial scores (3 epochs reduced by their mean): the seeded BCa bootstrap."""
    out = []
    for n in sizes:
        for accuracy in accuracies:
            a, _, _ = _draw(rng, reps, [1] * n, accuracy, 1.0, 0.0, epochs=3)
            truth = _truth(accuracy, 1.0)
            given = covered = 0
            for ra in a:
                ci, method = score_interval(list(ra))
                if ci is not None:
                    given += 1
                    covered += ci[0] <= truth <= ci[1]
            out.append({"questions": n, "accuracy": accuracy, "coverage": covered / given if given else None,
                        "no_interval": 1 - given / reps})
    return out


# ---------------------------------------------------------------------------------------------------------------
# The grid, the tables, the page


Section = Callable[[int, np.random.Generator, bool], list[Row]]


def _sections() -> dict[str, Section]:
    """Each section: (replications, generator, smoke) -> rows."""
    return {
        "wilson": lambda reps, rng, smoke: wilson([20] if smoke else [10, 20, 50, 100, 200, 500],
                                                  [0.05, 0.5] if smoke else [0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8,
                                                                               0.9, 0.95]),
        "binary": lambda reps, rng, smoke: binary([12] if smoke else [30, 100, 200, 500],
                                                  [0.5] if smoke else [0.05, 0.2, 0.5, 0.8, 0.9],
                                                  [0.0, 0.05] if smoke else [0.0, 0.05, 0.1]),
        "binary_designs": lambda reps, rng, smoke: binary_designs(reps, rng),
        "paired_t": lambda reps, rng, smoke: paired_t(reps, rng, [10] if smoke else [10, 30, 100],
                                                      [0.5] if smoke else [0.05, 0.5, 0.9], [0.0] if smoke else
                                                      [0.0, 0.05]),
        "clustered": lambda reps, rng, smoke: clustered(
            reps, rng, {k: DESIGNS[k] for k in (["41 + 9 x 1"] if smoke else DESIGNS)},
            [0.5] if smoke else [0.05, 0.2, 0.5, 0.8, 0.95], CLUSTERING[2:3] if smoke else CLUSTERING),
        "bca_epochs": lambda reps, rng, smoke: bca_epochs(min(reps, 1000), rng, [30] if smoke else [30, 100],
                                                          [0.5] if smoke else [0.05, 0.5, 0.9]),
    }


def run(reps: int, seed: int, smoke: bool, cache: Path | None = None) -> dict[str, list[Row]]:
    """Every section, each with its own generator (seeded from `seed` and the section's name); with `cache`, the
    sections already in that JSON file are read from it, and each one computed is added to it."""
    import json
    import sys
    import zlib

    done: dict[str, list[Row]] = json.loads(cache.read_text()) if cache and cache.is_file() else {}
    for name, section in _sections().items():
        if name not in done:
            started = time.process_time()
            done[name] = section(reps, np.random.default_rng([seed, zlib.crc32(name.encode())]), smoke)
            print(f"{name}: {time.process_time() - started:.0f} CPU s", file=sys.stderr)
            if cache:
                cache.write_text(json.dumps(done))
    return done


def verdict(results: dict[str, list[Row]]) -> list[str]:
    """The issue's criteria, checked on the results: every paired and clustered interval >= 93%, every test <= 7%
    (or refused), Wilson's mean coverage >= 94.5%."""
    lines = []

    def worst(section: str, key: str, pick: Callable[..., float]) -> float | None:
        values = [r[key] for r in results[section] if r.get(key) is not None]
        return pick(values) if values else None

    wilson_cov = [r["coverage"] for r in results["wilson"]]
    lines.append(f"wilson: mean coverage {_pct(float(np.mean(wilson_cov)))}, lowest {_pct(min(wilson_cov))}")
    for section, cov, size in (("binary", "coverage", "type_i"), ("paired_t", "coverage", "type_i"),
                               ("clustered", "run_coverage", "type_i"), ("bca_epochs", "coverage", None)):
        text = f"{section}: lowest coverage {_pct(worst(section, cov, min))}"
        if size:
            text += f", highest type I error {_pct(worst(section, size, max))}"
        lines.append(text)
    powers = [r["power_at_mde"] for s in ("binary", "paired_t") for r in results[s] if r.get("power_at_mde")]
    if powers:
        lines.append(f"power at the reported detectable effect: {_pct(min(powers))} to {_pct(max(powers))}")
    return lines


def page(results: dict[str, list[Row]], reps: int, seed: int, seconds: float, command: str) -> str:
    def fmt(rows: list[Row], percent: tuple[str, ...]) -> str:
        return markdown_table([{k: _pct(v) if k in percent else v for k, v in r.items()} for r in rows])

    pct = ("coverage", "type_i", "power_at_mde", "run_coverage", "run_refused", "test_refused", "rejections",
           "mid-p interval (before)", "no_interval")
    return "\n".join([
        "# Coverage of the intervals and error rates of the tests",
        "",
        "<!-- Written by benchmarks/coverage.py: run it again rather than edit this page. -->",
        "",
        f"Measured {date.today().isoformat()} with `{command}` ({reps} replications a simulated cell, seed {seed}, "
        f"{seconds / 60:.0f} CPU minutes on this project's 2-core machine). What each section is and how the data "
        "are drawn: the module's docstring (`benchmarks/coverage.py`); the methods: [Comparisons and "
        "statistics](comparisons.md). Coverage is of 95% intervals, type I error and power of tests at 0.05.",
        "",
        "## Summary",
        "",
        *[f"- {line}" for line in verdict(results)],
        "",
        "## A run's accuracy, 0/1 scores (Wilson; exact, every count of right answers)",
        "",
        "The per-type intervals are the same interval on a type's questions: the small sizes are theirs.",
        "",
        fmt(results["wilson"], pct),
        "",
        "## Two runs on 0/1 scores: the paired difference (exact, every table)",
        "",
        f"`discordant`: the share of questions one run gets right and the other wrong (independent errors, or a "
        f"fifth of that). Below {evalstats.EXACT_BELOW_DISCORDANT} discordant questions the exact unconditional "
        "interval, from there Tango's. `power_at_mde`: the exact power at the detectable effect the tool reports "
        "for that discordant share.",
        "",
        fmt(results["binary"], pct),
        "",
        "## The issue's designs, simulated through `srag compare`'s function",
        "",
        fmt(results["binary_designs"], pct),
        "",
        "## Partial scores (3 epochs, mean): the paired t test",
        "",
        "`power_at_mde`: rejections when the true difference is the median detectable effect the tool reported "
        "for that design under no difference. The detectable effect takes the spread of the differences it "
        "observed; near an accuracy of 0.05 a real improvement spreads them (more questions differ), so the test has "
        "less power there than the effect claims, and near 0.9 more. At 0.5 it is within a few points of 80%.",
        "",
        fmt(results["paired_t"], pct),
        "",
        "## Clustered questions: the run's interval (`wilson_cr2`) and the paired test (`paired_t_cr2`)",
        "",
        f"`effective`: effective clusters from the sizes; below {evalstats.MIN_EFFECTIVE_CLUSTERS:g} the t test is "
        "refused (`test_refused`), and the coverage and type I error are over the replications given a number.",
        "",
        fmt(results["clustered"], pct),
        "",
        "## Partial scores: a run's accuracy (BCa bootstrap over questions)",
        "",
        fmt(results["bca_epochs"], pct),
        "",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000, help="replications of each simulated cell")
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--smoke", action="store_true", help="every section at its smallest size; writes nothing")
    ap.add_argument("--out", type=Path, default=DOCS, help="the page to write (not with --smoke)")
    ap.add_argument("--cache", type=Path, help="a JSON file keeping each finished section, read again by a rerun")
    args = ap.parse_args()
    reps = 40 if args.smoke else args.reps
    started = time.process_time()
    results = run(reps, args.seed, args.smoke, args.cache)
    seconds = time.process_time() - started + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    if args.smoke:
        for line in verdict(results):
            print(line)
        print(f"smoke run: {seconds:.1f} CPU s")
        return
    command = ".venv/bin/python -m benchmarks.coverage" + (f" --reps {args.reps}" if args.reps != 2000 else "")
    args.out.write_text(page(results, reps, args.seed, seconds, command), encoding="utf-8")
    print("\n".join(verdict(results)))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
