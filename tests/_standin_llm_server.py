"""A stand-in for an OpenAI-compatible model server, for testing process management without llama.cpp.

Stdlib only. It serves GET /v1/models and POST /v1/chat/completions (a canned reply), and can misbehave on request:
start listening late, never become ready, ignore SIGTERM, or start a child process of its own.

    python tests/_standin_llm_server.py --port 8123 [--model NAME] [--reply TEXT] [--ready-after SECONDS]
        [--never-ready] [--ignore-sigterm] [--child-pid-file PATH] [--print-env NAME] [--exit-with CODE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="standin-model")
    parser.add_argument("--reply", default="canned reply")
    parser.add_argument("--ready-after", type=float, default=0.0, help="seconds to wait before listening")
    parser.add_argument("--never-ready", action="store_true", help="listen, but answer /v1/models with 503")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--child-pid-file", default=None, help="start a sleeping child and write its PID here")
    parser.add_argument("--print-env", action="append", default=[], help="print this environment variable at start")
    parser.add_argument("--exit-with", type=int, default=None, help="print an error and exit with this status")
    return parser.parse_args(argv)


def make_handler(args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            if self.path != "/v1/models":
                return self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            if args.never_ready:
                print("standin: still loading the model", flush=True)
                return self.send_json(503, {"error": {"message": "loading"}})
            self.send_json(200, {"object": "list", "data": [{"id": args.model, "object": "model",
                                                              "owned_by": "standin"}]})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/v1/chat/completions":
                return self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            self.send_json(200, completion(args.reply, request.get("model", args.model)))

        def send_json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *values: object) -> None:
            print(f"standin: {format % values}", flush=True)

    return Handler


def completion(text: str, model: str) -> dict:
    return {
        "id": "chatcmpl-standin", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in args.print_env:
        print(f"standin: env {name}={os.environ.get(name)}", flush=True)
    if args.exit_with is not None:
        print("standin: fatal: cannot load model file", flush=True)
        return args.exit_with
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda *_: print("standin: ignoring SIGTERM", flush=True))
    if args.child_pid_file:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        with open(args.child_pid_file, "w") as f:
            f.write(str(child.pid))
    time.sleep(args.ready_after)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args))
    print(f"standin: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
