"""How well the accuracy corrected by human labels (`evalstats.ppi_mean`, the figure `accuracy_judge_corrected`)
covers the true accuracy, against the judge's own Wilson interval, by seeded simulation; and how many labels a
target interval width needs (`evalstats.labels_needed`), against the width measured at that many labels.

A replication draws `items` answers, each right with probability `accuracy`, and a judge that calls a wrong answer
right with probability `wrong_right` and a right one wrong with `right_wrong`; then `labels` answers at random, whose
true verdicts a human gives. The true accuracy is the model's `accuracy` (what a run's interval claims to cover).
Three tables:

1. issue 45's design: 300 answers, 50 labels (and 30, 20, 10), accuracy 0.7, the judge's two error rates
   0.20 / 0.05 and swapped;
2. the grid behind `evalstats.MIN_LABELS`: accuracies 0.3 to 0.95, judges erring on 1% to 50% of answers of either
   kind, 82 or 300 answers, 10 to 50 labels: per label count, the lowest coverage over the grid and where, and how
   many cells fall short;
3. labels for a width: `labels_needed` for a few widths, and the mean width simulated at that many labels;
4. clustered questions (FinanceBench's filings): each cluster's accuracy drawn on the logit scale around 0.7 (SD 1)
   and its judge's leniency (wrong called right) from Beta(2, 8), so answers and the judge's errors go together in a
   cluster; the corrected interval with the clusters (`ppi_floor_cr2`) and without them, over balanced and
   unbalanced designs. The true accuracy is the mean of the clusters' accuracy distribution.

Run: `.venv/bin/python -m benchmarks.judge_correction [--reps 2000] [--grid-reps 1000]` (about 2 CPU-minutes at the
defaults on the project's 2-core machine; `--smoke`, its smallest size, in seconds). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import time
from itertools import product

import numpy as np

import evalstats as es
from benchmarks._scripted import markdown_table

JUDGES = [(0.01, 0.01), (0.05, 0.20), (0.20, 0.05), (0.50, 0.01), (0.50, 0.50)]
ACCURACIES = [0.3, 0.5, 0.7, 0.95]
SHORT = 0.94  # a cell's coverage below this is short of 0.95 by more than 1,000 runs' Monte Carlo error (0.007) allows


def replicate(rng: np.random.Generator, items: int, labels: int, accuracy: float, wrong_right: float,
              right_wrong: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true 0/1 verdicts, the judge's, the labelled positions) of one simulated run."""
    truth = (rng.random(items) < accuracy).astype(float)
    u = rng.random(items)
    judge = np.where(truth == 1, u >= right_wrong, u < wrong_right).astype(float)
    return truth, judge, rng.choice(items, labels, replace=False)


def coverage(rng: np.random.Generator, reps: int, items: int, labels: int, accuracy: float, wrong_right: float,
             right_wrong: float) -> dict[str, float]:
    """Shares of replications whose interval holds the true accuracy (corrected with the floor, without it, the
    judge's Wilson interval), and the corrected interval's mean width."""
    hits = {"corrected": 0, "no_floor": 0, "judge": 0}
    widths = []
    for _ in range(reps):
        truth, judge, labelled = replicate(rng, items, labels, accuracy, wrong_right, right_wrong)
        got = es.ppi_mean(judge, labelled, truth[labelled], min_labels=1)
        plain = es.ppi_mean(judge, labelled, truth[labelled], min_labels=1, floor=False)
        lo, hi = es.wilson_interval(int(judge.sum()), items)
        hits["corrected"] += got.lo <= accuracy <= got.hi
        hits["no_floor"] += plain.lo is not None and plain.lo <= accuracy <= plain.hi
        hits["judge"] += lo <= accuracy <= hi
        widths.append(got.hi - got.lo)
    return {**{k: v / reps for k, v in hits.items()}, "width": float(np.mean(widths))}


def issue_design(reps: int) -> list[dict[str, object]]:
    """Issue 45's design at its 50 labels, and at fewer."""
    rows = []
    for labels, (wrong_right, right_wrong) in product((50, 30, 20, 10), ((0.20, 0.05), (0.05, 0.20))):
        c = coverage(np.random.default_rng(45), reps, 300, labels, 0.7, wrong_right, right_wrong)
        rows.append({"labels": labels, "judge: wrong called right": wrong_right, "right called wrong": right_wrong,
                     "corrected covers": round(c["corrected"], 3), "without the floor": round(c["no_floor"], 3),
                     "judge's Wilson covers": round(c["judge"], 3), "corrected mean width": round(c["width"], 3)})
    return rows


def grid(reps: int) -> list[dict[str, object]]:
    worst: dict[int, tuple[float, str, float]] = {}
    widths: dict[int, list[float]] = {}
    short: dict[int, int] = {}
    seed = 0
    for labels, items, accuracy, (wrong_right, right_wrong) in product((10, 20, 30, 50), (82, 300), ACCURACIES,
                                                                      JUDGES):
        seed += 1
        c = coverage(np.random.default_rng(seed), reps, items, labels, accuracy, wrong_right, right_wrong)
        cell = f"N {items}, accuracy {accuracy}, judge {wrong_right}/{right_wrong}"
        if labels not in worst or c["corrected"] < worst[labels][0]:
            worst[labels] = (c["corrected"], cell, c["no_floor"])
        widths.setdefault(labels, []).append(c["width"])
        short[labels] = short.get(labels, 0) + (c["corrected"] < SHORT)
    cells = len(ACCURACIES) * len(JUDGES) * 2
    return [{"labels": labels, "cells": cells, "lowest coverage": round(worst[labels][0], 3),
             "in the cell": worst[labels][1], "there without the floor": round(worst[labels][2], 3),
             f"cells below {SHORT}": short[labels],
             "median width": round(float(np.median(widths[labels])), 3)} for labels in sorted(worst)]


def widths(reps: int) -> list[dict[str, object]]:
    rows = []
    rng = np.random.default_rng(7)
    for items, width in product((300, 1000), (0.10, 0.15, 0.20)):
        # the judge of issue 45's design: accuracy 0.7, errs on 0.3 * 0.2 + 0.7 * 0.05 = 9.5% of answers
        judged = 0.7 * 0.95 + 0.3 * 0.2
        error = 0.3 * 0.2 + 0.7 * 0.05
        bias = 0.7 - judged
        needed = es.labels_needed(width, judge_var=judged * (1 - judged), disagreement_var=error - bias ** 2,
                                  n_items=items, bias=bias)
        measured = None
        if needed is not None and needed <= items:
            got = [es.ppi_mean(j, pos, t[pos], min_labels=1) for t, j, pos in
                   (replicate(rng, items, needed, 0.7, 0.2, 0.05) for _ in range(reps))]
            measured = round(float(np.mean([g.hi - g.lo for g in got])), 3)
        rows.append({"questions": items, "target width": width, "labels needed": needed,
                     "mean width measured": measured})
    return rows


# (cluster sizes, labels): balanced, one large cluster beside many small ones, a FinanceBench-like spread, issue 44's
# smallest unbalanced design, and independent questions
CLUSTER_DESIGNS = {"30 x 10": ([10] * 30, 50), "100 + 40 x 5": ([100] + [5] * 40, 50),
                   "10 x 6 + 30 x 2 + 30 x 1": ([6] * 10 + [2] * 30 + [1] * 30, 40),
                   "41 + 9 x 1": ([41] + [1] * 9, 20), "300 x 1": ([1] * 300, 50)}


def clustered(reps: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(44)
    logit = np.log(0.7 / 0.3)
    truth = float(np.mean(1 / (1 + np.exp(-(logit + rng.standard_normal(1_000_000))))))
    rows = []
    for name, (sizes, labels) in CLUSTER_DESIGNS.items():
        cluster = np.repeat(np.arange(len(sizes)), sizes)
        items = len(cluster)
        hits = {"cr2": 0, "independent": 0}
        refused = 0
        widths: dict[str, list[float]] = {"cr2": [], "independent": []}
        for _ in range(reps):
            accuracy = 1 / (1 + np.exp(-(logit + rng.standard_normal(len(sizes)))))
            answers = (rng.random(items) < accuracy[cluster]).astype(float)
            lenient = rng.beta(2, 8, len(sizes))
            u = rng.random(items)
            judge = np.where(answers == 1, u >= 0.05, u < lenient[cluster]).astype(float)
            labelled = rng.choice(items, labels, replace=False)
            for key, labels_of in (("cr2", list(cluster)), ("independent", None)):
                got = es.ppi_mean(judge, labelled, answers[labelled], clusters=labels_of)
                if got.lo is None or got.hi is None:
                    refused += 1
                    continue
                hits[key] += got.lo <= truth <= got.hi
                widths[key].append(got.hi - got.lo)
        given = reps - refused
        rows.append({"design (cluster sizes)": name, "questions": items, "labels": labels,
                     "clustered covers": round(hits["cr2"] / given, 3) if given else None,
                     "refused": refused, "independent covers": round(hits["independent"] / reps, 3),
                     "clustered mean width": round(float(np.mean(widths["cr2"])), 3) if widths["cr2"] else None,
                     "independent mean width": round(float(np.mean(widths["independent"])), 3)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000, help="replications of issue 45's design and per width")
    parser.add_argument("--grid-reps", type=int, default=1000, help="replications per cell of the grid")
    parser.add_argument("--smoke", action="store_true", help="the smallest size: every table, a few replications")
    args = parser.parse_args()
    if args.smoke:
        args.reps, args.grid_reps = 20, 5
    started = time.process_time()
    print("## Issue 45's design (300 answers, accuracy 0.7)\n")
    print(markdown_table(issue_design(args.reps)))
    print("\n## The grid (coverage of the corrected interval, per number of labels)\n")
    print(markdown_table(grid(args.grid_reps)))
    print("\n## Labels for a width (accuracy 0.7, the judge erring on 9.5% of answers)\n")
    print(markdown_table(widths(args.reps // 4)))
    print("\n## Clustered questions (the corrected interval with and without the clusters)\n")
    print(markdown_table(clustered(max(1, args.reps * 3 // 4))))
    print(f"\n({time.process_time() - started:.0f} CPU-s; --reps {args.reps}, --grid-reps {args.grid_reps})")


if __name__ == "__main__":
    main()
