"""`srag probe`: what an endpoint accepts (tools, strict json_schema, json_object, the completion-limit field,
temperature), printed as a table and written as a provider profile that `--profile` and `llm.profile` can name."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from pipelines.cli import CliError, add_command, add_json


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "probe", "find out what an OpenAI-compatible endpoint accepts; write a profile", """
        Send a few small requests to an endpoint to find out what it accepts: tool calls, strict json_schema,
        json_object, which completion-limit field, temperature. Prints a table and writes a provider profile that
        --profile and llm.profile can name. The key is read from the variable --api-key-env names, never printed.""",
        ["srag probe --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B",
         "srag probe --base-url https://api.openai.com/v1 --model gpt-4.1-mini --out profiles/openai.json"])
    p.add_argument("--base-url", required=True, metavar="URL", help="the endpoint, up to its /v1")
    p.add_argument("--model", required=True, metavar="NAME", help="the model, as the endpoint names it")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="NAME of the variable holding the key (default OPENAI_API_KEY)")
    p.add_argument("--out", type=Path, metavar="FILE", help="profile file to write (default: profiles/<model>.json)")
    add_json(p, "the capabilities and the profile file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from srag_core.llm import ProbeError, capability_table, probe, write_profile  # loads the openai SDK: not for --help

    try:
        result = probe(args.base_url, args.model, api_key_env=args.api_key_env)
    except ProbeError as error:
        raise CliError(str(error)) from None
    out = args.out or Path("profiles") / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', args.model)}.json"
    path = write_profile(result.profile, out)
    if args.json:
        print(json.dumps({**result.as_dict(), "profile_file": str(path)}))
    else:
        print(capability_table(result))
        print(f"profile written to {path}: use --profile {path} (or llm.profile: {path})")
    return 0
