"""The one base of every model this project writes to a file and reads back, and the JSON objects beside them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

# A JSON object as `json.dumps` writes it: what `--json` prints, a config as a file holds it. Free-form by nature.
JsonObject = dict[str, Any]


class StoredModel(BaseModel):
    """A model of a file the project writes and reads back: results.jsonl's lines, run.json, summary.json,
    sweep.json, a review's samples and labels. A key this release does not know is kept, not refused, so a file a
    later release wrote loses nothing when it is read here; the string under each field is its description (in the
    docs' reference and in the JSON schema). A model that must refuse what it does not know says so in its class
    line (`extra="forbid"`), as one that must not coerce says `strict=True`."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    def __setattr__(self, name: str, value: Any) -> None:
        # A record read from the store shares its set of given fields with the records like it (`_lines`); setting a
        # field gives it a set of its own first.
        if isinstance(self.__pydantic_fields_set__, frozenset):
            object.__setattr__(self, "__pydantic_fields_set__", set(self.__pydantic_fields_set__))
        super().__setattr__(name, value)
