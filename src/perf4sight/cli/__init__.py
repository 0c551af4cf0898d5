"""The `perf4sight` command: a thin layer over the stage functions.

Each stage registers its own subcommand from a module of this package. Any
`Perf4sightError` (bad config, missing file, bad CSV...) or `OSError` (an output folder
blocked by a file, no permission, a full disk) becomes one line on stderr and exit
code 2, never a traceback.

Importing this package loads no torch, scikit-learn or pandas: each command checks its
options first and imports what its stage needs after, so that a wrong option is answered
at once. An option given twice is refused here, for every command.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections import Counter
from collections.abc import Sequence

import typer
import typer.main
from rich.markup import escape

from perf4sight import console
from perf4sight.cli import cache, fingerprint, predict, profile, prune, run
from perf4sight.device.runner import interrupt
from perf4sight.errors import Perf4sightError, UsageError, clip
from perf4sight.networks.trust import allow_model_files_anywhere

__all__ = ["app", "main"]


def _usage_errors() -> tuple[type[Exception], ...]:
    """click's usage errors (an unknown option, a missing argument): from the copy of click
    that newer typer carries, whose exceptions derive from `TyperException`, or from click."""
    found: list[type[Exception]] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    try:
        from click.exceptions import ClickException
    except ImportError:
        return tuple(found)
    return (*found, ClickException)


_USAGE_ERRORS = _usage_errors()

app = typer.Typer(
    name="perf4sight",
    help="Predict CNN training memory and latency on a device before training.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or info lines."),
    allow_model_files: bool = typer.Option(
        False, "--allow-model-files",
        help="Let specs name model files (Python code, run to build a network) outside their own folder."),
) -> None:
    console.set_quiet(quiet)
    allow_model_files_anywhere(allow_model_files)


for _module in (prune, profile, fingerprint, predict, run, cache):
    _module.register(app)


def _refuse_repeated_options(args: Sequence[str]) -> None:
    """Refuse an option given more than once (UsageError naming it), where click would keep
    the last value silently: all but those documented as repeatable lists (`multiple`, as
    `prune --net`). The command line is read by click's own parser, level by level (the
    app's options, then each subcommand's); what does not parse is left to click's errors."""
    command = typer.main.get_command(app)
    parent, name, rest = None, "perf4sight", list(args)
    while command is not None:
        ctx = command.context_class(command, parent=parent, info_name=name, resilient_parsing=True,
                                    **command.context_settings)
        _, rest, order = command.make_parser(ctx).parse_args(args=rest)
        given = Counter(param for param in order
                        if param.param_type_name == "option" and param.expose_value and not param.multiple)
        for param, count in given.items():
            if count > 1:
                flag = next((opt for opt in param.opts if opt.startswith("--")), param.opts[0])
                raise UsageError(f"{flag} is given {'twice' if count == 2 else f'{count} times'}; give it once")
        resolve = getattr(command, "resolve_command", None)  # a group: on to its subcommand
        if resolve is None or not rest:
            return
        parent = ctx
        name, command, rest = resolve(ctx, rest)


# The longest error line printed: the list of known networks fits, a file's content does not.
_MESSAGE_LENGTH = 4000


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (2 for a user error, 130 when interrupted).

    A termination request (SIGTERM: a job scheduler's stop, `kill`) stops the run as Ctrl-C
    does: the profiler's worker is stopped with it and what was recorded is kept."""
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, interrupt) if on_main_thread else None
    try:
        _refuse_repeated_options(sys.argv[1:] if argv is None else argv)
        code = app(args=argv, prog_name="perf4sight", standalone_mode=False)
    except (Perf4sightError, OSError) as exc:  # OSError: a folder blocked by a file, no permission, a full disk
        console.err.print(f"[red]error:[/red] {escape(clip(str(exc), _MESSAGE_LENGTH))}", soft_wrap=True, emoji=False)
        return 2
    except (typer.Abort, KeyboardInterrupt):
        code = 130
    except _USAGE_ERRORS as exc:
        exc.show()  # type: ignore[attr-defined]  # every subclass raised has it
        return 2
    finally:
        if on_main_thread and previous is not None:  # None: a handler not set from Python
            signal.signal(signal.SIGTERM, previous)
    if code == 130:  # typer answers Ctrl-C with this code itself
        console.err.print("aborted")
    return code if isinstance(code, int) else 0


def entry() -> None:
    """The `perf4sight` console script."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
