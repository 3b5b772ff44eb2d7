"""A scripted agent behind the fake LLM server, small benchmarks for pipeline tests, and a check that a local Ray
listens on loopback only.

Question n asks "What is the code of item Q<n>?" and its gold answer is "<n>". The scripted agent calls one tool,
then answers n. Sets of question numbers select injected faults; `healed` switches the persistent ones off, so a
rerun can fill the failures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.config import set_dotted
from tests.conftest import REPO

QUESTION = re.compile(r"Question: What is the code of item Q(\d+)\?")


def write_benchmark(root: Path, sample_corpus: Path, n: int) -> tuple[Path, Path]:
    corpus = root / "corpus"
    if not corpus.exists():
        shutil.copytree(sample_corpus, corpus)
    questions = root / "questions.jsonl"
    with questions.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i:03d}", "question": f"What is the code of item Q{i}?", "answer": str(i),
                                 "type": "even" if i % 2 == 0 else "odd"}) + "\n")
    return corpus, questions


@dataclass
class ScriptedAgent:
    failing: set[int] = field(default_factory=set)  # 503 on every call until healed
    rate_limited: set[int] = field(default_factory=set)  # one 429 on the first call
    slow: set[int] = field(default_factory=set)  # first call slower than the client timeout
    malformed_body: set[int] = field(default_factory=set)  # first call answers a non-JSON body
    malformed_turn: set[int] = field(default_factory=set)  # first turn is prose, not a JSON turn
    failing_after_tool: set[int] = field(default_factory=set)  # the tool call works, then 503s until healed
    tool_error: set[int] = field(default_factory=set)  # the tool call names a set that does not exist
    empty: set[int] = field(default_factory=set)  # answers with an empty string
    never_answer: set[int] = field(default_factory=set)  # calls tools until the step limit, even when asked to answer
    wrong: set[int] = field(default_factory=set)  # answers n + 1000
    reworded: set[int] = field(default_factory=set)  # answers "code n": right, but no rule can tell (the LLM judges)
    reads_docs: set[int] = field(default_factory=set)  # its tool call is read_docs (documents in the observation)
    failing_status: int = 503
    judge: "ScriptedJudge | None" = None  # answers the LLM judge's calls when they come to this endpoint too
    delay: float = 0.0  # every answer waits this long (pipeline overhead benchmark, kill tests)
    slow_delay: float = 2.0
    healed: bool = False
    calls: Counter = field(default_factory=Counter)
    active: int = 0
    peak_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: dict[str, Any]) -> Any:
        if self.judge is not None and ScriptedJudge.asks(request):
            return self.judge(request)
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        n = int(QUESTION.search(first_user).group(1))
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if first_user.startswith("Passages:"):  # vanilla RAG: one call, whose reply is the answer
            turn = 1_000
        protocol = _protocol(request)
        with self.lock:
            self.calls[n] += 1
            first_call = self.calls[n] == 1
            self.active += 1
            self.peak_active = max(self.peak_active, self.active)
        try:
            if self.delay:
                time.sleep(self.delay)
            if protocol != "agent" and not ((n in self.failing) and not self.healed):
                return self._plain(request, protocol, n, turn)
            return self._reply(n, turn, first_call)
        finally:
            with self.lock:
                self.active -= 1

    def _plain(self, request: dict[str, Any], protocol: str, n: int, turn: int) -> Any:
        """A-RAG's turns (a keyword_search call, then the answer) and a one-call system's answer, as plain text."""
        if protocol == "arag" and turn == 0:
            return tool_call_reply(request, "keyword_search", {"keywords": [f"Q{n}"]})
        if protocol == "agents_sdk" and turn == 0:
            return tool_call_reply(request, "find_documents", {"words": [f"Q{n}", "item"]})
        return "" if n in self.empty else str(n + 1000) if n in self.wrong else str(n)

    def _reply(self, n: int, turn: int, first_call: bool) -> Any:
        if (n in self.failing or (turn > 0 and n in self.failing_after_tool)) and not self.healed:
            return {"status": self.failing_status, "body": {"error": {"message": "scripted outage"}}}
        if first_call and n in self.rate_limited:
            return {"status": 429, "headers": {"Retry-After": "0"}}
        if first_call and n in self.slow:
            return {"delay": self.slow_delay, "content": "too late"}
        if first_call and n in self.malformed_body:
            return {"malformed": True}
        if turn == 0 and first_call and n in self.malformed_turn:
            return "Let me think about item codes first."
        never = n in self.never_answer and turn < 1_000  # the agent's turns: vanilla RAG's one call answers
        if turn == 0 or (turn == 1 and n in self.malformed_turn) or never:
            name = "no_such_set" if n in self.tool_error else "all"
            if n in self.reads_docs:
                return json.dumps({"thought": "read", "tool": "read_docs", "args": {"set_name": name, "max_docs": 2}})
            return json.dumps({"thought": "look", "tool": "count_set", "args": {"set_name": name}})
        answer = "" if n in self.empty else str(n + 1000) if n in self.wrong else f"code {n}" \
            if n in self.reworded else str(n)
        return json.dumps({"thought": "found it", "answer": answer})


def _protocol(request: dict[str, Any]) -> str:
    """Which system sent a request: A-RAG (it offers keyword_search), the Agents SDK system (find_documents), a
    one-call system (its prompt: the test systems', the docs' example), else the agent (or vanilla RAG, which the
    agent's script answers too)."""
    tools = {t.get("function", {}).get("name") for t in request.get("tools") or ()}
    if "keyword_search" in tools:
        return "arag"
    if "find_documents" in tools:
        return "agents_sdk"
    if str(request["messages"][0].get("content", "")).startswith(("Answer with the item code alone",
                                                                   "Answer the question from the documents")):
        return "oneshot"  # the test systems' and docs/examples/word_overlap.py's prompts
    return "agent"


def tool_call_reply(request: dict[str, Any], name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A 200 whose message is one tool call (the fake server's replies carry text only), its usage counted as the
    server counts a text reply's."""
    from tests.fake_llm import count_tokens, prompt_text

    arguments = json.dumps(args)
    prompt, completion = count_tokens(prompt_text(request)), count_tokens(arguments)
    return {"body": {"id": "chatcmpl-tool", "object": "chat.completion", "created": 0, "model": request.get("model"),
                     "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                         "role": "assistant", "content": None, "tool_calls": [
                             {"id": f"call_{name}", "type": "function",
                              "function": {"name": name, "arguments": arguments}}]}}],
                     "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                               "total_tokens": prompt + completion}}}


@dataclass
class ScriptedJudge:
    """The LLM judge's endpoint: extraction returns the system's response as it is, the verdict compares it with
    the reference; `failing` answers HTTP 500 to every call (an outage) until it is switched off."""

    failing: bool = False
    calls: int = 0
    passes: set[str] = field(default_factory=set)  # answers it calls correct whatever the reference (its errors)

    @staticmethod
    def asks(request: dict[str, Any]) -> bool:
        """Whether a request is one of the judge's (extraction or verdict), by its system prompt."""
        return str(request["messages"][0].get("content", "")).startswith(("You reduce", "You grade"))

    def __call__(self, request: dict[str, Any]) -> Any:
        self.calls += 1
        if self.failing:
            return {"status": 500, "body": {"error": {"message": "scripted judge outage"}}}
        system, user = request["messages"][0]["content"], request["messages"][-1]["content"]
        if system.startswith("You reduce"):
            return user.split("System response:\n", 1)[1]
        reference = user.split("Reference answer:\n", 1)[1].split("\n", 1)[0]
        answer = user.split("System answer:\n", 1)[1].strip()
        right = answer == reference or answer in self.passes
        return json.dumps({"verdict": "correct" if right else "incorrect", "score": int(right),
                           "rationale": "compared with the reference", "abs_diff": None})


def run_config(corpus: Path, questions: Path, base_url: str, *, tracking_uri: str | None = None, **overrides) -> dict:
    cfg = {
        "name": "test",
        "corpus": str(corpus),
        "questions": str(questions),
        "system": "zero_ingestion",
        "llm": {"base_url": base_url, "model": "scripted", "max_retries": 2, "backoff_base_s": 0.01,
                "backoff_max_s": 0.05, "timeout_s": 1.0},
        "agent": {"max_steps": 3},
        "judge": {"use_llm": False},
        "execution": {"actors": 2, "episodes_per_actor": 8, "cpus_per_actor": 0.25},
        "tracking": {"uri": tracking_uri, "experiment": "tests"},
    }
    for key, value in overrides.items():
        set_dotted(cfg, key, value)
    return cfg


def run_and_kill(ray_local, cfg, runs: Path, episodes: int) -> str:
    """`srag run CFG` as its own driver process on the test session's Ray, SIGKILLed (its process group) once it
    has recorded `episodes` episodes; returns the run id."""
    import signal

    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    driver = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", str(cfg), "--runs-dir", str(runs),
                               "--quiet", "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    deadline, results = time.monotonic() + 300, None
    while time.monotonic() < deadline and driver.poll() is None:
        found = list(runs.glob("*/results.jsonl"))
        if found and found[0].read_text().count('"type": "episode"') >= episodes:
            results = found[0]
            break
        time.sleep(0.1)
    assert results is not None, driver.communicate()[1][-3000:]
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    time.sleep(1.0)  # let the killed driver's workers stop
    return results.parent.name


def rest(uri: str, path: str, **query) -> dict:
    """GET on an MLflow tracking server's REST API."""
    import urllib.parse
    import urllib.request

    url = f"{uri}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query, doseq=True)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def rest_post(uri: str, path: str, body: dict, version: str = "2.0") -> dict:
    import urllib.request

    req = urllib.request.Request(f"{uri}/api/{version}/mlflow/{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def search_traces(uri: str, experiment_id: str, filter_string: str) -> list[dict]:
    """Every trace of the experiment matching `filter_string`, through MLflow's REST API (`traces/search`, v3), page
    by page: what the server shows, not what our client logged."""
    found: list[dict] = []
    token = None
    while True:
        body = {"locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment_id}}],
                "filter": filter_string, "max_results": 100}
        if token:
            body["page_token"] = token
        page = rest_post(uri, "traces/search", body, version="3.0")
        found += page.get("traces", [])
        token = page.get("next_page_token")
        if not token:
            return found


class CliCapture:
    """The CLI's --json output, for module-scoped fixtures (capsys is per test)."""

    def cli(self, *argv) -> tuple[int, dict]:
        import contextlib
        import io

        from pipelines.cli import main

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(list(argv) + ["--json", "--quiet"])
        return code, json.loads(buf.getvalue())


def run_scenario(module: str, workdir: Path, sample_corpus: Path, n: int, *extra: str) -> dict:
    """Run `python -m tests.<module> WORKDIR CORPUS N [EXTRA...]` in its own process (a `ray.cluster_utils.Cluster`
    cannot share a process with the test session's Ray) and return the JSON object it prints on its RESULT line."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", f"tests.{module}", str(workdir), str(sample_corpus), str(n), *extra],
                          cwd=repo, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[0][len("RESULT "):])


# Prints the node address of this process's Ray and the hosts its process tree listens on; run after Ray started.
LISTENING_REPORT = r'''
import os
import ray

def read(path):  # a thread or process may end while it is read: nothing to report for it
    try:
        return open(path).read()
    except OSError:
        return ""

def listed(path):
    try:
        return os.listdir(path)
    except OSError:
        return []

def tree(pid):
    kids = [int(k) for t in listed(f"/proc/{pid}/task") for k in read(f"/proc/{pid}/task/{t}/children").split()]
    return [pid] + [p for k in kids for p in tree(k)]

inodes = set()
for pid in tree(os.getpid()):
    for fd in listed(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
hosts = set()
for table in ("tcp", "tcp6"):
    for line in open(f"/proc/net/{table}").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:  # LISTEN
            hosts.add(f[1].split(":")[0])
print("NODE", ray.util.get_node_ip_address())
print("HOSTS", " ".join(sorted(hosts)))
ray.shutdown()
'''
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def assert_local_ray_on_loopback(start_ray: str) -> None:
    """Run `start_ray` (Python that starts a local Ray) in a fresh interpreter, then check that the node address is
    loopback and that every socket its process tree listens on is bound to loopback."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    # A Ray temp folder of its own: init_ray joins this user's `ray start` head when Ray's address file names one
    # (another test's cluster, perhaps stopping), and then no Ray process would be a child of the one checked here.
    ray_tmp = tempfile.mkdtemp(prefix="srl", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    try:
        proc = subprocess.run([sys.executable, "-c", start_ray + LISTENING_REPORT], cwd=REPO, capture_output=True,
                              env={**env, "PYTHONPATH": str(REPO), "RAY_TMPDIR": ray_tmp}, text=True, timeout=300)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    # after a command run with --json, what the process prints goes to stderr (stdout holds the command's JSON)
    lines = dict(line.split(" ", 1) for line in (proc.stdout + proc.stderr).splitlines()
                 if line.startswith(("NODE ", "HOSTS ")))
    assert lines.get("NODE") == "127.0.0.1", proc.stdout + proc.stderr[-3000:]
    hosts = set(lines["HOSTS"].split())
    assert hosts and hosts <= LOOPBACK, hosts  # gcs_server, raylet, workers, agents: none on another interface
