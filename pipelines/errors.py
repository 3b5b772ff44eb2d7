"""The one exception type for input the user can fix.

`srag` prints a `UserError` as one line, `srag COMMAND: error: MESSAGE`, and exits with status 2; the message names
the problem and the fix. Any other exception is a bug and keeps its traceback, so a bug is never passed off as bad
input. Each part of the program subclasses it for its own kind of input (`pipelines.config.ConfigError`,
`pipelines.cli.CliError`, `pipelines.datasets.QuestionsError`, ...).
"""

from __future__ import annotations


class UserError(ValueError):
    """Input the user can fix: a flag, a file, a config, a run id, a folder (a ValueError, so code that caught
    ValueError around input still does)."""
