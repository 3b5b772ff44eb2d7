"""The local model's speed (SmolLM2-135M on llama.cpp's server from the xllamacpp wheel), as the pipeline sees it.

    .venv/bin/python -m benchmarks.local_llm [--threads 1 2] [--slots 1 2 4] [--episodes 4] [--prompt-tokens 2600]
    .venv/bin/python -m benchmarks.local_llm --smoke   # one thread, one slot, one one-step episode, a short prompt

Two tables (markdown):

1. Prompt processing and generation speed per thread count and flash-attention setting, from the `timings` the
   server reports for each request (one slot): a fresh ~N-token prompt with `max_tokens` 1, then 64 generated tokens
   on the same, now cached, prompt with end-of-sequence suppressed, plain and with the agent's turn schema as a
   grammar. Median of `--repeats`.
2. Agent episodes per minute at 1, 2 and 4 parallel slots: the demo's agent and model settings (read from
   configs/quickstart.yaml: first turn a tool call, core tools, 3 steps, JSON turns held to each tool's schema, its
   thread count) on the first `--episodes` sample questions, run by as many threads as there are slots. Also the
   tool calls per episode.

On a shared machine the figures move with whatever else runs: the load average is printed with each table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from pipelines.engine.endpoint import LocalModelServer, machine_cores
from srag_core import load_corpus
from srag_core.agent import Agent, AgentConfig, turn_schema
from srag_core.llm import LLMClient, LLMConfig

SMOKE_NEEDS = ("local_model",)  # besides the checkout, for `python -m benchmarks` (its --smoke run)
SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki"
EOS_TOKEN_ID = 2  # SmolLM2's <|im_end|>
FILLER = ("The archive holds letters, ledgers and court filings from the river towns; each record names a clerk, "
          "a date and the parties involved. ")
QUICKSTART = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml").read_text())["base"]
DEMO_AGENT = AgentConfig(**QUICKSTART["agent"])
DEMO_THREADS = QUICKSTART["local_model"].get("n_threads")


def load() -> str:
    return "load average " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def completion(base_url: str, body: dict) -> dict:
    """POST /v1/chat/completions with the raw body (the OpenAI client drops llama.cpp's `timings`)."""
    request = urllib.request.Request(f"{base_url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)


def speeds(base_url: str, prompt_tokens: int, nonce: int) -> dict[str, float]:
    """Prompt tokens/s on a fresh prompt; generation tokens/s, plain and under the turn schema's grammar."""
    prompt = f"Run {nonce}. " + FILLER * max(1, prompt_tokens // 29) + "\nSummarise the archive."  # ~29 tokens each
    messages = [{"role": "user", "content": prompt}]
    fresh = completion(base_url, {"messages": messages, "max_tokens": 1, "temperature": 0})["timings"]
    generate = {"messages": messages, "max_tokens": 64, "temperature": 0, "logit_bias": [[EOS_TOKEN_ID, -100]]}
    plain = completion(base_url, generate)["timings"]
    schema = {"type": "json_object", "schema": turn_schema(["apply_filter", "read_docs", "count_set"])}
    constrained = completion(base_url, {**generate, "response_format": schema})["timings"]
    return {"prompt_n": fresh["prompt_n"], "prompt_tok_s": fresh["prompt_per_second"],
            "gen_tok_s": plain["predicted_per_second"], "json_gen_tok_s": constrained["predicted_per_second"]}


def speed_table(threads: list[int], prompt_tokens: int, repeats: int) -> str:
    rows = ["| threads | flash attention | prompt tokens | prompt tokens/s | generation tokens/s | "
            "generation with the turn schema |", "|---|---|---|---|---|---|"]
    for n in threads:
        for flash in ("off", "on"):
            with LocalModelServer(n_threads=n, n_parallel=1, flash_attn=flash) as server:
                runs = [speeds(server.base_url, prompt_tokens, nonce=1000 * n + i) for i in range(repeats)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            rows.append(f"| {n} | {flash} | {med['prompt_n']:.0f} | {med['prompt_tok_s']:.0f} | "
                        f"{med['gen_tok_s']:.0f} | {med['json_gen_tok_s']:.0f} |")
    return "\n".join(rows) + f"\n\n({load()}, {machine_cores()} cores)"


def episode_table(slots: list[int], episodes: int, agent: AgentConfig = DEMO_AGENT) -> str:
    corpus = load_corpus(SAMPLE / "corpus")
    questions = [json.loads(line) for line in (SAMPLE / "questions.jsonl").read_text().splitlines()][:episodes]
    rows = ["| parallel slots | episodes | wall s | episodes/minute | LLM calls | tool calls per episode | "
            "tokens per episode |", "|---|---|---|---|---|---|---|"]
    for n in slots:
        with LocalModelServer(n_parallel=n, n_threads=DEMO_THREADS) as server:
            config = LLMConfig(base_url=server.base_url, model=server.model, response_format="json_object_schema",
                               max_tokens=QUICKSTART["llm"]["max_tokens"], timeout_s=600, max_retries=0)
            with LLMClient(config) as llm, ThreadPoolExecutor(n) as pool:
                system = Agent(corpus, llm, agent)
                started = time.monotonic()
                done = list(pool.map(system.run, [q["question"] for q in questions], [q["id"] for q in questions]))
                wall = time.monotonic() - started
        calls = sum(e.llm_calls for e in done)
        tools = [sum(1 for t in e.trace if t["type"] == "tool" and t["tool"]) for e in done]
        tokens = statistics.mean(e.usage.total_tokens for e in done)
        rows.append(f"| {n} | {len(done)} | {wall:.0f} | {60 * len(done) / wall:.2f} | {calls} | "
                    f"{min(tools)} to {max(tools)} | {tokens:.0f} |")
        print(f"  {n} slots: {wall:.0f} s, statuses {[e.status for e in done]}", flush=True)
    return "\n".join(rows) + f"\n\n({load()}, {machine_cores()} cores, {DEMO_THREADS or 'default'} threads)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=2600)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-episodes", action="store_true")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest size: one thread, one slot, one episode of one step, a 200-token prompt "
                             "(CI runs it so)")
    args = parser.parse_args()
    if args.smoke:
        args.threads, args.slots, args.episodes, args.prompt_tokens, args.repeats = [1], [1], 1, 200, 1
    if not args.skip_speed:
        print(speed_table(args.threads, args.prompt_tokens, args.repeats), flush=True)
    if not args.skip_episodes:
        agent = DEMO_AGENT.model_copy(update={"max_steps": 1}) if args.smoke else DEMO_AGENT
        print(episode_table(args.slots, args.episodes, agent), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
