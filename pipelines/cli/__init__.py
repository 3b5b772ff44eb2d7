"""`srag`: the one command line. Each subcommand lives in its own module of this package (parse arguments, call the
engine in `pipelines.engine`, print) and registers itself here with `add_command`, which gives every command its
description and examples.

Every subcommand that produces a result can print it as JSON (`--json`): stdout then holds that JSON alone (`OwnLines`
sends what other threads print, Ray's included, to stderr). Bad input exits with status 2 and one line
on stderr naming the problem and the fix (`UserError` and the library errors in `input_error`); anything else is a
bug and keeps its traceback. Heavy imports (Ray, MLflow, torch) happen inside the subcommands that need them, so
`srag --help` and `srag replay` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import io
import sys
import textwrap
import threading
from contextlib import contextmanager, nullcontext
from enum import IntEnum
from pathlib import Path
from typing import Any, Iterator, Sequence, TextIO

from pipelines import paths
from pipelines.errors import UserError

SUBCOMMAND_MODULES = [
    "pipelines.cli.replay",
    "pipelines.cli.data",
    "pipelines.cli.ask",
    "pipelines.cli.run",
    "pipelines.cli.rerun",
    "pipelines.cli.judge",
    "pipelines.cli.sweep",
    "pipelines.cli.report",
    "pipelines.cli.compare",
    "pipelines.cli.systems",
    "pipelines.cli.runs",
    "pipelines.cli.review",
    "pipelines.cli.estimate",
    "pipelines.cli.car",
    "pipelines.cli.datasets",
    "pipelines.cli.build_benchmark",
    "pipelines.cli.discover",
    "pipelines.cli.submit",
    "pipelines.cli.probe",
    "pipelines.cli.completion",
]
HELP_WIDTH = 100  # descriptions are wrapped here; `srag report` text fits it too


class CliError(UserError):
    """Bad input from the user on the command line: printed as one line, exit status 2."""


class Exit(IntEnum):
    """srag's exit statuses (`EXIT_MEANINGS` says each one's meaning, shown in `srag --help`). For `srag run`,
    `rerun`, `judge` and `sweep`, where several apply, the first of STOPPED, BUDGET, INCOMPLETE, MLFLOW wins; for a
    sweep, over all its runs."""

    COMPLETE = 0
    INCOMPLETE = 1
    BAD_INPUT = 2
    STOPPED = 3
    MLFLOW = 4
    BUDGET = 5
    INTERRUPTED = 130
    TERMINATED = 143


EXIT_MEANINGS = {
    Exit.COMPLETE: "done (run, rerun, judge, sweep: every question of every run is scored, and MLflow took every "
                   "write)",
    Exit.INCOMPLETE: "ended, but not all of it succeeded: questions failed, are pending or missing (srag report "
                     "says which), replay steps reported an error, ask got no answer, a cluster job failed, or "
                     "estimate's pilots were declined",
    Exit.BAD_INPUT: "bad input (a flag, a file, a config, a run id, a folder, an unreachable endpoint before "
                    "anything started): one line on stderr says what and how to fix it",
    Exit.STOPPED: "a run stopped starting episodes: its endpoint cannot answer, or no worker could run",
    Exit.MLFLOW: "every question is accounted for, but MLflow did not take every write (srag run --resume RUN_ID "
                 "writes them again)",
    Exit.BUDGET: "a run's or the sweep's budget stopped it; what never started is not run (srag run --resume RUN_ID "
                 "--max-cost USD runs it)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
    Exit.TERMINATED: "terminated (SIGTERM: ray job stop, kill)",
}


def exit_table() -> str:
    """The exit statuses as the text table `srag --help` ends with (and the docs' CLI reference shows)."""
    lines = ["exit status:"]
    for code, meaning in EXIT_MEANINGS.items():
        lines += textwrap.wrap(meaning, HELP_WIDTH - 2, initial_indent=f"  {int(code):<4} ", subsequent_indent=" " * 7)
    lines.append("  With several runs (a sweep), the first of 3, 5, 1, 4 that applies to any run wins.")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# The parser: descriptions and examples on every command, one-line usage errors


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written (wrapped by `add_command`), options wrapped at HELP_WIDTH whatever the
    terminal: the help reads the same everywhere, and the docs' CLI reference made from it does not change with the
    terminal it was made in."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=28, width=HELP_WIDTH)


class Parser(argparse.ArgumentParser):
    """argparse with srag's conventions: a command's description and examples keep their line breaks, and a usage
    error is one line on stderr, exit status 2, naming the problem and where the usage is."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse's own prints the whole usage first: several lines
        self.exit(Exit.BAD_INPUT, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def add_command(sub: argparse._SubParsersAction, name: str, summary: str, description: str,
                examples: Sequence[str]) -> argparse.ArgumentParser:
    """A subcommand with its one-line summary (in `srag --help`), its description (paragraphs separated by blank
    lines, wrapped here) and its examples, shown in `srag NAME --help` and in the docs' CLI reference."""
    paragraphs = [textwrap.fill(" ".join(p.split()), HELP_WIDTH) for p in description.strip().split("\n\n")]
    epilog = "example" + ("s" if len(examples) > 1 else "") + ":\n" + "\n".join(f"  {e}" for e in examples)
    return sub.add_parser(name, help=summary, description="\n\n".join(paragraphs), epilog=epilog)


def one_line(text: object) -> str:
    return " ".join(str(text).split())


def wrapped(text: str) -> str:
    """`text` with each of its lines wrapped at HELP_WIDTH columns (continuations indented), for text reports; a word
    longer than that (a path, an id) is left whole."""
    return "\n".join(textwrap.fill(line, HELP_WIDTH, subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False) for line in text.split("\n"))


class Renamed(argparse.Action):
    """An option's old name, kept working but hidden from the help: it stores where the new name does and warns, in
    one line on stderr, that the old name will go."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class DoesNothing(argparse.Action):
    """A flag a command once took that never did anything there: accepted, hidden, with a one-line warning."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help=argparse.SUPPRESS, default=False, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: warning: {option_string} does nothing here and is deprecated", file=sys.stderr)
        setattr(namespace, self.dest, True)


# ---------------------------------------------------------------------------------------------------------------
# Options several commands share, each with one name and one wording


def add_json(p: argparse.ArgumentParser, what: str = "the result") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as one JSON object instead of text")


def add_quiet(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def add_pool_options(p) -> None:
    """`--concurrency` and `--max-runs`: the sweep's pool (`srag sweep`, `srag submit`); `p` a parser or group."""
    p.add_argument("--concurrency", type=positive_int, metavar="N",
                   help="episodes in flight across the sweep's pool (execution.concurrency)")
    p.add_argument("--max-runs", type=positive_int, metavar="N",
                   help="runs with episodes starting at once (execution.max_runs)")


def add_data_root(p: argparse.ArgumentParser, what: str = "the staged benchmark files") -> None:
    """`--data-root`, for the commands that read a dataset by name (a folder that must exist)."""
    p.add_argument("--data-root", type=existing_folder, metavar="DIR",
                   help=f"folder of {what} (default: ${paths.DATA_ENV}; the shipped samples need none)")


def add_cache_dir(p: argparse.ArgumentParser, what: str, sub: str) -> None:
    """`--cache-dir` (once `--cache-root` on some commands, which still works): where this command caches `what`."""
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help=f"where {what} are cached (default: {sub}/ in {paths.CACHE_HELP})")
    p.add_argument("--cache-root", dest="cache_dir", type=Path, action=Renamed, new="--cache-dir")


def add_runs_dir(p: argparse.ArgumentParser, help: str = "where run folders and the local MLflow store live") -> None:
    p.add_argument("--runs-dir", type=folder, default=paths.runs_dir(), metavar="DIR",
                   help=f"{help} (default: ${paths.RUNS_ENV}, else ./runs)")


def folder(value: str) -> Path:
    """A folder that may not exist yet (argparse `type`): an existing file is a one-line usage error."""
    path = Path(value).expanduser()
    if path.is_file():
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder")
    return path


def existing_folder(value: str) -> Path:
    """A folder that must exist (argparse `type`): a file or a missing path is a one-line usage error."""
    path = Path(value).expanduser()
    if path.is_file():
        raise argparse.ArgumentTypeError(f"{value} is a file, not a folder: give the folder that holds the files")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"folder {value} does not exist")
    return path


def positive_int(value: str) -> int:
    """A count of at least 1 (argparse `type`): 0 or less is a usage error, never silently ignored."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def non_negative_usd(value: str) -> float:
    """An amount in US dollars, 0 or more (argparse `type`)."""
    try:
        usd = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected US dollars, such as 5 or 0.50, got {value!r}") from None
    if not usd >= 0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be 0 or more US dollars, got {value}")
    return usd


# ---------------------------------------------------------------------------------------------------------------


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("scalablerag-eval")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (the package is not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="srag", description=textwrap.fill(
        "Distributed batch evaluation of agentic retrieval: run a system over a benchmark (srag run), a grid of "
        "them (srag sweep), read and compare the results (srag report, srag compare, srag runs), on Ray with "
        "MLflow tracking. `srag COMMAND --help` describes each command, with examples.", HELP_WIDTH),
        epilog="examples:\n  srag sweep configs/quickstart.yaml --dry-run\n  srag sweep configs/quickstart.yaml\n"
               "  srag runs\n\n" + exit_table())
    parser.add_argument("--version", action="version", version=f"srag {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


# Library errors that mean input the user can fix, by the module that defines each: looked up only when that module
# is loaded (an error of a module never imported cannot have been raised), so none is imported for this.
LIBRARY_INPUT_ERRORS = {
    "srag_core.corpus": ("CorpusError",),  # a corpus path with no usable document
    "srag_core.embeddings": ("EncoderError",),  # an encoder name that cannot be loaded
    "srag_core.llm": ("TransportError",),  # an installed HTTP stack that cannot hold requests to their deadline
    "car_baselines": ("CarDataError",),  # a CAR data file, dataset, split or retriever that cannot be used
}
# OSErrors about a path the user named (or a folder that lacks a file it should hold).
PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def input_error(error: BaseException) -> str | None:
    """The one line to print when `error` is bad input; None when it is not (a bug: its traceback is shown)."""
    if isinstance(error, UserError):
        return one_line(error)
    if isinstance(error, PATH_ERRORS):
        if error.filename is not None and error.strerror:
            return f"{error.filename}: {error.strerror}"
        return one_line(error)
    for module, names in LIBRARY_INPUT_ERRORS.items():
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(error, tuple(getattr(loaded, n) for n in names)):
            return one_line(error)
    return None


class OwnLines(io.TextIOBase):
    """sys.stdout while a command prints JSON: what the command's own thread prints while it runs goes to stdout, a
    whole line at a time; what any other thread prints, and anything printed after the command ended, goes to stderr.
    Ray prints what the cluster reports (a lost node, a dead worker: "(raylet) ..." lines, dozens of them) to
    sys.stdout whatever `log_to_driver` says: from its error-listener thread while the driver runs, and the last of
    them from the main thread when Ray shuts down at the process's exit. A whole line is written at once, so in a Ray
    job's log, where stdout and stderr meet, no other line can land inside it (`srag status` reads it there)."""

    def __init__(self, out: TextIO, err: TextIO, thread: threading.Thread) -> None:
        self.out, self.err, self.thread = out, err, thread
        self.open = True  # until the command has ended
        self.pending = ""  # the command's current line, not ended yet

    def write(self, text: str) -> int:
        if not self.open or threading.current_thread() is not self.thread:
            return self.err.write(text)
        self.pending += text
        if "\n" in self.pending:
            done, _, self.pending = self.pending.rpartition("\n")
            self.out.write(done + "\n")
            self.out.flush()
        return len(text)

    def close_command(self) -> None:
        """The command has ended: its last line goes out, and from now on everything goes to stderr."""
        if self.pending:
            self.out.write(self.pending)
            self.pending = ""
        self.out.flush()
        self.open = False

    def flush(self) -> None:
        self.out.flush()
        self.err.flush()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.out.encoding


@contextmanager
def own_stdout() -> Iterator[None]:
    """Stdout holds only what this thread prints while the block runs (`OwnLines`). While this process stays
    connected to Ray, the redirection stays after the block: Ray prints until it shuts down, at the process's exit."""
    out = sys.stdout
    own = OwnLines(out, sys.stderr, threading.current_thread())
    sys.stdout = own
    try:
        yield
    finally:
        own.close_command()
        if sys.stdout is own and not _connected_to_ray():
            sys.stdout = out


def _connected_to_ray() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def main(argv: list[str] | None = None) -> int:
    """Run one srag command line (`argv`, else the process's); returns its exit status (`Exit`)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version and a usage error end here: their status is the command's
        return done.code if isinstance(done.code, int) else Exit.BAD_INPUT
    if args.command is None:  # bare `srag` asks what there is: the help, as `srag --help` gives it
        parser.print_help()
        return Exit.COMPLETE
    if isinstance(sys.stdout, OwnLines):  # left by an earlier --json command of this process: stdout again
        sys.stdout = sys.stdout.out
    try:
        with own_stdout() if getattr(args, "json", False) else nullcontext():
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("srag: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except Exception as e:
        line = input_error(e)
        if line is None:
            raise
        print(f"srag {args.command}: error: {line}", file=sys.stderr)
        return Exit.BAD_INPUT
