"""MkDocs hooks (mkdocs.yml `hooks:`).

In a table, a code span writes a literal `|` as `\\|`, which GitHub shows as `|` and the embedded READMEs rely on;
Python-Markdown keeps the backslash inside code, so `prison\\|jail` would show another regex. In table cells of the
built page, code loses that backslash.
"""

from __future__ import annotations

import re

_CELL = re.compile(r"<t([dh])([^>]*)>(.*?)</t\1>", re.S)
_CODE = re.compile(r"<code>(.*?)</code>", re.S)


def _cell(match: re.Match[str]) -> str:
    body = _CODE.sub(lambda code: "<code>" + code.group(1).replace("\\|", "|") + "</code>", match.group(3))
    return f"<t{match.group(1)}{match.group(2)}>{body}</t{match.group(1)}>"


def on_page_content(html: str, **kwargs: object) -> str:
    return _CELL.sub(_cell, html)
