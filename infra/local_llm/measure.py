"""Measure the local model server: startup time and memory, prompt and generation speed, the context sizes it accepts.

    .venv/bin/python infra/local_llm/measure.py [--n-ctx 8192] [--threads 2] [--prompt-tokens 2000] [--repeats 3]

Prints one JSON object. Timings are wall-clock through the OpenAI API, as the pipeline sees them: prompt speed from a
one-token completion of a fresh ~N-token prompt; generation speed from a second request on the same prompt (llama.cpp
reuses the cached prefix) with end-of-sequence suppressed so it always generates `--gen-tokens` tokens. Speeds on a
shared machine vary with whatever else runs; the median of `--repeats` runs is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from pipelines.local_llm import LocalModelServer  # noqa: E402

EOS_TOKEN_ID = "2"  # SmolLM2's <|im_end|>
FILLER = ("The archive holds letters, ledgers and court filings from the river towns; each record names a clerk, "
          "a date and the parties involved. ")
JSON_SCHEMA = {"type": "object", "properties": {"thought": {"type": "string"}, "answer": {"type": "string"}},
               "required": ["thought", "answer"]}


def prompt_of(tokens: int, nonce: int) -> str:
    """About `tokens` tokens of text; the nonce up front defeats llama.cpp's prefix cache between runs."""
    repeats = max(1, tokens // 29)  # FILLER is ~29 tokens in SmolLM2's tokenizer
    return f"Run {nonce}. " + FILLER * repeats + "\nSummarise the archive."


def timed(client: openai.OpenAI, model: str, prompt: str, max_tokens: int, **extra) -> tuple[float, int, int]:
    started = time.perf_counter()
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                           max_tokens=max_tokens, temperature=0, **extra)
    return time.perf_counter() - started, reply.usage.prompt_tokens, reply.usage.completion_tokens


def speeds(client: openai.OpenAI, model: str, prompt_tokens: int, gen_tokens: int, nonce: int,
           **extra) -> dict[str, float]:
    prompt = prompt_of(prompt_tokens, nonce)
    pp_s, n_prompt, _ = timed(client, model, prompt, 1)
    tg_s, _, n_gen = timed(client, model, prompt, gen_tokens, logit_bias={EOS_TOKEN_ID: -100}, **extra)
    return {"prompt_tokens": n_prompt, "prompt_tok_s": n_prompt / pp_s, "gen_tokens": n_gen, "gen_tok_s": n_gen / tg_s}


def context_limit_check(client: openai.OpenAI, model: str, n_ctx: int) -> dict[str, object]:
    """What a prompt just under and just over n_ctx does."""
    result: dict[str, object] = {}
    for label, tokens in (("near_limit", n_ctx - 400), ("over_limit", n_ctx + 400)):
        try:
            seconds, n_prompt, _ = timed(client, model, prompt_of(tokens, 10_000 + tokens), 8)
            result[label] = {"ok": True, "prompt_tokens": n_prompt, "seconds": round(seconds, 1)}
        except openai.APIError as e:
            result[label] = {"ok": False, "error": f"{type(e).__name__}: {str(e)[:160]}"}
    return result


def resident_mb(pid: int | None) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return kb // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-limit-check", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    with LocalModelServer(n_ctx=args.n_ctx, n_threads=args.threads) as server:
        startup_s = time.perf_counter() - started
        startup_rss_mb = resident_mb(server.pid)
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=600)
        plain = [speeds(client, server.model, args.prompt_tokens, args.gen_tokens, i) for i in range(args.repeats)]
        json_mode = [speeds(client, server.model, args.prompt_tokens, args.gen_tokens, 100 + i,
                            response_format={"type": "json_object", "schema": JSON_SCHEMA})
                     for i in range(args.repeats)]
        limits = {} if args.skip_limit_check else context_limit_check(client, server.model, args.n_ctx)
        threads = server.n_threads
        rss_mb = resident_mb(server.pid)
    print(json.dumps({
        "n_ctx": args.n_ctx, "threads": threads, "load_average": os.getloadavg(), "startup_s": round(startup_s, 2),
        "startup_rss_mb": startup_rss_mb, "server_rss_mb": rss_mb,
        "prompt_tokens": plain[0]["prompt_tokens"],
        "prompt_tok_s": round(statistics.median(r["prompt_tok_s"] for r in plain), 1),
        "gen_tok_s": round(statistics.median(r["gen_tok_s"] for r in plain), 1),
        "json_gen_tok_s": round(statistics.median(r["gen_tok_s"] for r in json_mode), 1),
        "context": limits,
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
