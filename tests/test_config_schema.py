"""The JSON schema of the run and sweep configs describes every field (the docs' config reference is generated from
it), and describing them changed no config's fingerprint."""

from __future__ import annotations

from typing import Any

import pytest

from pipelines.config import RunConfig, SweepConfig, validate_run

# A run config that sets a field in every section, a provider profile given inline among them.
SAMPLE = {
    "name": "sample", "dataset": "twowiki-sample", "variant": "limited_ingestion",
    "llm": {"model": "gpt-4.1-mini", "profile": "openai-chat", "max_tokens": 512, "seed": 7,
            "price_per_million": [0.4, 1.6, 0.1], "extra_body": {"top_k": 20}},
    "agent": {"max_steps": 12, "tool_families": ["core"], "first_turn_tool": True, "max_text_chars": 200},
    "judge": {"fallback": "em", "llm": {"model": "judge-model", "base_url": "http://localhost:8000/v1",
                                        "profile": {"name": "mine", "protocol": "tools", "reasoning_tokens": 256}}},
    "limits": {"limit": 50, "shuffle": True, "seed": 3, "epochs": 3, "reducer": "pass_at_2", "max_cost_usd": 5},
    "execution": {"actors": 4, "max_concurrent_requests": 8},
    "tracking": {"experiment": "sample"},
    "local_model": {"n_ctx": 4096},
    "retrieval": {"top_k": 8},
    "ingestion": {"sample_size": 10, "chunk_unit": "chars"},
}


def _models(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every object schema with properties: the root and each model in `$defs`, by name."""
    found = {schema.get("title", "(root)"): schema}
    found.update({name: d for name, d in schema.get("$defs", {}).items() if "properties" in d})
    return found


@pytest.mark.parametrize("config", [RunConfig, SweepConfig], ids=lambda c: c.__name__)
def test_every_field_and_model_has_a_description(config):
    # The descriptions are the fields' attribute docstrings (use_attribute_docstrings, pydantic 2.7 and later):
    # with an older pydantic, or a field documented by a # comment, the description is missing.
    models = _models(config.model_json_schema())
    missing = [f"{name}.{field}" for name, model in models.items()
               for field, spec in model["properties"].items() if not (spec.get("description") or "").strip()]
    assert not missing, f"fields without a description (a docstring under the field): {', '.join(missing)}"
    undescribed = [name for name, model in models.items() if not (model.get("description") or "").strip()]
    assert not undescribed, f"models without a class docstring: {', '.join(undescribed)}"


def test_the_schema_covers_every_section_of_a_run():
    models = _models(RunConfig.model_json_schema())
    assert {"RunConfig", "LLMConfig", "Prices", "Profile", "AgentConfig", "JudgeSettings", "Limits", "Execution",
            "Tracking", "LocalModel", "RetrievalSettings", "IngestionSettings"} <= set(models)


def test_descriptions_leave_the_fingerprints_as_they_were():
    # Computed before the fields were documented. A change of a default, or of what the fingerprints hash, changes
    # them on purpose (and this test with them); a description never may.
    cfg = validate_run(SAMPLE, "sample")
    assert (cfg.fingerprint(), cfg.episode_fingerprint()) == ("6643e59dc5", "b8b7a695e7")
