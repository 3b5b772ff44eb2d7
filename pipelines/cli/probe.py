"""`srag probe`: what an endpoint accepts (tools, strict json_schema, json_object, the completion-limit field,
temperature), printed as a table and written as a provider profile that `--profile` and `llm.profile` can name."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from pipelines.cli import CliError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probe", help="find out what an OpenAI-compatible endpoint accepts; write a profile")
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="NAME of the variable holding the key")
    p.add_argument("--out", type=Path, help="profile file to write (default: profiles/<model>.json)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
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
