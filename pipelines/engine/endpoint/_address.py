"""What an endpoint is and whether it answers. An endpoint is its base URL, its model and the name of the variable
holding its API key (never the key): two accounts on one provider have two quotas, two models on one server two
queues. One request limiter serves each endpoint (`cluster.Pool.limiter`); before a run or sweep starts, each
endpoint is asked once whether it answers (`endpoint_problem`, `judge_warning`)."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from http.client import HTTPException

from pipelines.config import RunConfig
from srag_core import LLMConfig


def endpoint_url(llm: LLMConfig) -> str:
    """The base URL requests go to: the config's, else OPENAI_BASE_URL, else OpenAI's (as the openai SDK does)."""
    return (llm.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")


def endpoint_key(llm: LLMConfig) -> str:
    """One endpoint, in words: its URL, model and API key variable (the key itself is never read here)."""
    return f"{endpoint_url(llm)} {llm.model} (key ${llm.api_key_env})"


def run_endpoint(cfg: RunConfig) -> str:
    """The endpoint of a run's episodes before any local model server is started (a local model: its settings)."""
    if cfg.local_model.enabled:
        return f"local model {cfg.local_model.model_dump_json()}"
    return endpoint_key(cfg.llm)


# Long enough for a remote provider across the world to answer a GET, short enough that a sweep of dead endpoints
# says so in seconds.
ENDPOINT_TIMEOUT_S = 5.0


def endpoint_problem(cfg: RunConfig, answers: dict[str, str | None], timeout_s: float | None) -> str | None:
    """Why the run's endpoint cannot be used (it does not answer), or None. A local model is started by the run
    itself, so it is not asked; nor is any endpoint without `timeout_s`."""
    if cfg.local_model.enabled or timeout_s is None:
        return None
    problem = _ask_once(cfg.llm, answers, timeout_s)
    return None if problem is None else f"{problem}: start it, or fix llm.base_url"


def judge_warning(cfg: RunConfig, answers: dict[str, str | None], timeout_s: float | None) -> str | None:
    """A warning when the LLM judge has an endpoint of its own that does not answer: the run goes on, its verdicts
    stay pending."""
    judge = cfg.judge
    if not judge.use_llm or judge.llm is None or timeout_s is None:
        return None
    problem = _ask_once(judge.llm, answers, timeout_s)
    return None if problem is None else f"the LLM judge's {problem}: its verdicts will stay pending (srag judge " \
                                        "RUN_ID scores them once it answers, or with --no-llm)"


def _ask_once(llm: LLMConfig, answers: dict[str, str | None], timeout_s: float) -> str | None:
    url = llm.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"  # as the openai SDK does
    if url not in answers:
        answers[url] = reachable(url, timeout_s)
    return answers[url]


def reachable(base_url: str, timeout_s: float = ENDPOINT_TIMEOUT_S) -> str | None:
    """None when an HTTP server answers a GET of `base_url`/models (any status: a 401 or a 404 is an answer, and the
    run's own requests say more), else why not. No key is sent: whether it answers is all this asks."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None
    except urllib.error.URLError as e:
        return f"endpoint {base_url} does not answer ({e.reason})"
    except (OSError, HTTPException, ValueError) as e:  # a timeout, a reset, not HTTP at all, not a URL
        return f"endpoint {base_url} does not answer ({type(e).__name__}: {e})".replace(": )", ")")
