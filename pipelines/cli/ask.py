"""`srag ask`: answer one question with one system, printing each step as it happens."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pipelines.cli import CliError, Renamed, add_command, add_json, positive_int
from pipelines.config import (
    PROFILE_HELP,
    VARIANTS,
    JudgeSettings,
    LocalModel,
    RunConfig,
    endpoint_from,
    read_yaml,
    validate_run,
    with_profile,
)

if TYPE_CHECKING:
    from pipelines.engine.records import Judgement


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "ask", "answer one question with the agent (or another system)", """
        Answer one question over a corpus with one system, printing each step as it happens: the model's
        thought, the tool it calls and what the tool found. With --gold, the answer is scored as a run would score
        it. Nothing is written to the runs folder or MLflow. The LLM comes from --config (its llm and local_model
        sections), --base-url and --model, or $OPENAI_BASE_URL and $OPENAI_MODEL.""", [
        'srag ask "Who is the father of the director of film Homage At Siesta Time?" '
        "--corpus pipelines/samples/twowiki/corpus --config configs/local_smollm2.yaml",
        'srag ask "How many filings mention a recall?" --corpus corpus/ --model gpt-4.1-mini --gold 3 --json'])
    p.add_argument("question", metavar="QUESTION", help="the question to answer (quote it)")
    p.add_argument("--corpus", required=True, metavar="PATH", help="folder of .txt files, .jsonl or HippoRAG .json")
    p.add_argument("--config", metavar="FILE", help="YAML with llm/agent/system sections (a run config works)")
    p.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint; default: config, else "
                                                     "$OPENAI_BASE_URL")
    p.add_argument("--model", metavar="NAME", help="model name; default: config, else $OPENAI_MODEL")
    p.add_argument("--profile", metavar="PROFILE", help=PROFILE_HELP)
    p.add_argument("--system", metavar="SYSTEM",
                   help=f"the system that answers: a built-in ({', '.join(VARIANTS)}; default {VARIANTS[0]}), an "
                        "installed one (srag systems lists them) or module:Class")
    p.add_argument("--variant", dest="system", action=Renamed, new="--system")
    p.add_argument("--max-steps", type=positive_int, metavar="N", help="tool-call limit (agent.max_steps)")
    p.add_argument("--gold", metavar="ANSWER", help="score the answer against this one with the configured judge "
                   "(rules, and the LLM judge unless the config sets judge.use_llm: false)")
    add_json(p, 'the episode record (with --gold, its judgement under "judgement")')
    p.set_defaults(func=run)


def settings(args: argparse.Namespace) -> tuple[RunConfig, LocalModel]:
    """The run config `ask` answers with (a run config's sections, or the flags alone), and its local model."""
    data = read_yaml(args.config) if args.config else {}
    source = args.config or "command line"
    llm, local = endpoint_from(data, source, args.base_url, args.model)
    if llm is not None and args.profile:
        llm = with_profile(llm, args.profile, "--profile")
    if llm is None:
        raise CliError("no model: pass --model, set llm.model in --config, or set OPENAI_MODEL")
    agent_data = dict(data.get("agent") or {})
    if args.max_steps:
        agent_data["max_steps"] = args.max_steps
    run = {key: data[key] for key in ("retrieval", "ingestion", "judge", "params") if key in data}
    run.update(name="ask", corpus=args.corpus, questions="(srag ask: one question)", llm=llm.model_dump(),
               agent=agent_data, system=args.system or data.get("system") or data.get("variant") or "zero_ingestion")
    return validate_run(run, source), local


def run(args: argparse.Namespace) -> int:
    from pipelines.engine.endpoint import open_endpoint
    from pipelines.engine.systems import EpisodeLimits, answer_question, ingestion_cache, prepare_for, system_of
    from srag_core import LLMClient, load_corpus
    from srag_core.discovery import inline_map  # `srag ask` starts no Ray: discovery's sandbox runs in process

    cfg, local = settings(args)
    system = system_of(cfg, args.config or "the command line")
    corpus = load_corpus(args.corpus)
    for w in corpus.warnings:
        print(f"srag ask: warning: {w}", file=sys.stderr)
    printer = None if args.json else StepPrinter()
    with open_endpoint(cfg.llm, local) as llm_cfg, LLMClient(llm_cfg) as llm:
        prepared = prepare_for(system, corpus, llm, ingestion_cache(cfg.ingestion.cache_dir), inline_map)
        limits = EpisodeLimits(cfg.agent.episode_timeout_s, cfg.agent.token_budget, cfg.agent.cost_budget_usd)
        episode = answer_question(system, args.question, "ask", corpus=corpus, resources=prepared.resources,
                                  client=llm, limits=limits, on_event=printer)
        judgement = judge(args.question, episode, args.gold, cfg.judge, llm_cfg) if args.gold is not None else None
    if args.json:
        record = episode.model_dump()
        if judgement is not None:
            record["judgement"] = judgement.model_dump(mode="json")
        print(json.dumps(record, ensure_ascii=False, default=str))
    else:
        print(f"\nanswer: {episode.answer}" if episode.answer is not None else f"\nno answer ({episode.status})")
        tokens = episode.usage.total_tokens
        print(f"[{episode.status}{': ' + episode.error if episode.error else ''} · {episode.steps} steps · "
              f"{tokens:,} tokens · ${episode.usage.cost_usd:.4f} · {episode.wall_s:.1f} s]")
        if judgement is not None:
            print(verdict_line(judgement))
    return 0 if episode.finished else 1


def judge(question: str, episode, gold: str, settings: JudgeSettings, llm_cfg) -> Judgement:
    """The judge stage of `srag run` on one answer: its judgement with what the judge's calls spent."""
    from pipelines.datasets import Question
    from pipelines.engine.records import EpisodeRecord
    from pipelines.engine.scoring import JudgeStage

    stage = JudgeStage(settings, llm_cfg, threads=1)
    try:
        record = EpisodeRecord(question_id="ask", attempt=1, status=episode.status, answer=episode.answer)
        return stage.submit(Question(id="ask", question=question, answer=gold), record).result()
    finally:
        stage.close()


def verdict_line(j: Judgement) -> str:
    if j.score is None:
        return f"judge: not scored ({j.judge_error})"
    why = f" · {_clip(j.rationale, 200)}" if j.rationale else ""
    error = f" · judge error: {j.judge_error}" if j.judge_error else ""
    return f"judge: {j.verdict} (score {j.score:g} from {j.score_source}){why}{error} · " \
           f"{j.judge_tokens or 0:,} judge tokens"


class StepPrinter:
    """Prints each step of an episode as it happens: thought, tool call, a one-line observation summary."""

    def __call__(self, event: dict[str, Any]) -> None:
        if event["type"] == "llm" and event.get("thought"):
            print(f"\nstep {event['step']} · thought: {_clip(event['thought'], 300)}", flush=True)
        if event["type"] == "llm" and event.get("tool"):
            print(f"  → {event['tool']} {_clip(json.dumps(event.get('args'), ensure_ascii=False), 200)}", flush=True)
        elif event["type"] == "tool":
            print(f"  ← {summarize(event['observation'])}", flush=True)


def summarize(obs: dict[str, Any]) -> str:
    if "error" in obs:
        return f"error: {_clip(obs['error'], 200)}"
    if "positive_count" in obs:
        return f"{obs['positive_set']}: {obs['positive_count']} of {obs['total_filtered']} documents"
    if "set_created" in obs:
        return f"{obs['set_created']}: {obs['count']} filenames matched"
    if "value_set" in obs and "extracted" in obs:
        return f"{obs['value_set']}: {obs['extracted']} values from {obs['scanned']} documents"
    if "result" in obs:
        return f"result: {_clip(json.dumps(obs['result'], ensure_ascii=False, default=str), 200)}"
    if "count" in obs:
        return f"count: {obs['count']}"
    if "docs" in obs:
        return f"read {obs['returned']} of {obs['of']} documents: {', '.join(d['filename'] for d in obs['docs'])}"
    return _clip(json.dumps(obs, ensure_ascii=False, default=str), 200)


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."
