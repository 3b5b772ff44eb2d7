"""`srag compare`: two runs paired question by question, with a test, its interval and what the questions could
detect."""

from __future__ import annotations

import argparse
import json

from pipelines.cli import add_command, wrapped
from pipelines.cli._results import TEST_LABELS, common_options
from pipelines.engine.records import RunComparison


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "compare", "pair two runs question by question, with significance", """
        Pair two runs on their shared questions: which questions each got right, the difference in accuracy (B - A)
        with its 95% interval and p-value (mid-p McNemar for 0/1 scores, a paired t-test otherwise), and the
        smallest difference these questions can detect. Runs whose question sets, epochs and reducer, or judges
        differ are refused unless --force.""", [
        "srag compare 20261204-202239-one-epoch-411f 20261204-202247-three-epochs-7944 --force",
        "srag compare RUN_A RUN_B --json"])
    p.add_argument("run_a", metavar="RUN_A", help="the first run (A)")
    p.add_argument("run_b", metavar="RUN_B", help="the second run (B); the difference is B - A")
    p.add_argument("--force", action="store_true",
                   help="compare runs whose question sets, epochs and reducer, or judges differ (marked so)")
    common_options(p, "the comparison", progress=False)
    p.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from pipelines.engine.reports import compare_runs

    result = compare_runs(args.runs_dir, args.run_a, args.run_b, force=args.force)
    print(json.dumps(result.model_dump(mode="json")) if args.json else wrapped("\n".join(comparison_lines(result))))
    return 0


def comparison_lines(result: RunComparison) -> list[str]:
    """`srag compare` as text: what was paired, how the answers split, the difference and what it could detect."""
    lines = []
    if not result.comparable:
        lines.append(f"warning: not comparable ({'; '.join(result.differences)}): compared only because of --force")
    lines.append(f"paired questions: {result.n_paired}  (A {result.accuracy_a}, B {result.accuracy_b}), scored in "
                 "both runs (an empty answer is a wrong answer)")
    if result.n_left_out:
        reasons = ", ".join(f"{n} {why}" for why, n in result.left_out.items() if n)
        lines.append(f"left out: {result.n_left_out} question(s) failed, pending or missing in either run "
                     f"({reasons}); `srag rerun` and `srag judge` can fill them")
    lines.append(f"both right {result.both_right} · only A {result.only_a_right} · only B {result.only_b_right} · "
                 f"neither {result.neither_right}")
    test = TEST_LABELS[result.test][0]
    clustered = (f", {result.n_clusters} clusters, {result.effective_clusters} effective, {result.df} df"
                 if result.n_clusters is not None else "")
    p = f"p = {result.p_value:.4g}" if result.p_value is not None else "no p-value"
    lines.append(f"B - A = {result.difference}, 95% interval {result.difference_ci95} ({test}{clustered}; the "
                 f"interval is the one the test inverts), {p}")
    lines.append(_detectable_line(result))
    if result.unestimated_reason:
        lines.append(f"not estimated: {result.unestimated_reason}")
    if (corrected := result.judge_corrected) is not None:  # human labels on a shared review sample
        if corrected.difference is None:
            lines.append(str(corrected.reason))
        else:
            lines.append(f"corrected by human labels (sample {corrected.sample_id}, {corrected.n_labelled} of "
                         f"{corrected.n_questions} questions labelled in both runs): B - A = {corrected.difference}, "
                         f"95% interval {corrected.difference_ci95} ({corrected.ci_method}), p = "
                         f"{corrected.p_value}; the judge's own over the same questions: "
                         f"{corrected.judge_difference}" + (f" ({corrected.reason})" if corrected.reason else ""))
    if result.failure_class_moves:  # where the difference comes from: retrieval misses or reasoning
        moves = ", ".join(f"{move} {n}" for move, n in result.failure_class_moves.items())
        lines.append(f"failure classes that changed (A -> B, questions): {moves}")
    if result.replaced_scored_a or result.replaced_scored_b:
        lines.append(f"warning: {result.replaced_scored_a} paired question(s) of A and {result.replaced_scored_b} of "
                     "B were re-run after they were scored (srag rerun --replace-scored): their scores are the later "
                     "attempts', a best-of-N")
    return lines


def _detectable_line(result: RunComparison) -> str:
    """The smallest difference these paired questions could detect, or why it is not known (never "none": that
    read as "no effect is detectable")."""
    questions = f"{result.n_paired} paired question{'' if result.n_paired == 1 else 's'}"
    if result.min_detectable_effect is None:  # the next line says why, when the test says
        return f"minimum detectable effect: not known for these {questions}"
    return (f"minimum detectable effect (80% power, alpha 0.05, this test on these {questions}): "
            f"{result.min_detectable_effect:.4f}; a non-significant difference smaller than that says too few "
            "questions, not no effect")
