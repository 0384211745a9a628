"""Shared CLI conventions: exit codes, one-line error messages instead of tracebacks, and progress reporting.

Every failure a user can cause or meet — bad input, a bad `GPUADVISOR_*` setting, a store or server that goes away —
ends as one `error:` line on stderr and a non-zero exit code; `main()` catches the last two kinds for every command.
Long work shows its progress: a rich bar on a terminal, one line per stage otherwise (logs, CI, pipes).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from pydantic import ValidationError

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: message` on stderr and exit with `code` (2: bad input, 3: a needed resource is missing).

    One line, whatever the message: a driver's multi-line text is joined, SQLAlchemy's link to its FAQ left out."""
    lines = [line.strip() for line in message.splitlines() if not line.startswith("(Background on this error")]
    err_console.print(f"[bold red]error:[/] {escape(' '.join(line for line in lines if line))}")
    raise typer.Exit(code)


def settings_error(e: ValidationError) -> str:
    """One line naming the `GPUADVISOR_*` variable a settings class could not read, and why."""
    first = e.errors()[0]
    variable = f"GPUADVISOR_{str(first['loc'][0]).upper()}" if first["loc"] else "a GPUADVISOR_* variable"
    value = f" (got {first['input']!r})" if isinstance(first.get("input"), str | int | float) else ""
    return f"invalid setting {variable}: {first['msg']}{value}"


def unavailable_error(e: BaseException) -> str | None:
    """The one-line message for a store or server connection that failed or went away; None for anything else.

    Checked through `sys.modules` so that a command which never loaded SQLAlchemy or httpx does not import them here.
    """
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(e, sa_exc.OperationalError | sa_exc.InterfaceError):
        first = str(e.orig if getattr(e, "orig", None) is not None else e).strip().splitlines() or [type(e).__name__]
        return f"lost the connection to the store: {first[0]}"
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(e, httpx.TransportError):
        url = ""
        with contextlib.suppress(RuntimeError):  # an error raised before any request was built has no URL
            url = f" {e.request.url}"
        return f"lost the connection to the server{url}: {e or type(e).__name__}"
    return None


def table_console() -> Console:
    """Where tables go: the terminal's width on a terminal; piped to a file or another program, wide enough that no
    column is squeezed or cut to 80 characters (rich sizes a table to its content, not to this width)."""
    if Console().is_terminal:
        return Console(highlight=False)
    return Console(highlight=False, width=400)


class Stages:
    """Progress of one long command: `stage(label)` for a step of unknown length, `bar(label, total)` for a counted
    one. On a terminal a rich spinner or bar with the elapsed time while it runs; in every case one line
    `✓ label (duration)` when it ends (so logs and pipes get one line per stage). Everything goes to stderr: stdout
    keeps the command's result (and --json)."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False) -> None:
        self.console = console or err_console
        self.quiet = quiet

    @contextmanager
    def stage(self, label: str, doing: str | None = None) -> Iterator[None]:
        """`doing` shows while it runs (default `label…`), `✓ label (seconds)` once it is done."""
        with self.bar(label, None, doing):
            yield

    @contextmanager
    def bar(self, label: str, total: int | None, doing: str | None = None) -> Iterator[_Advance]:
        started = time.monotonic()
        if self.quiet:
            yield _Advance(None, None)
            return
        if self.console.is_terminal:
            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if total is not None:
                columns += [BarColumn(), MofNCompleteColumn()]
            with Progress(*columns, TimeElapsedColumn(), console=self.console, transient=True) as progress:
                yield _Advance(progress, progress.add_task(f"{doing or label}…", total=total))
        else:
            yield _Advance(None, None)
        self.console.print(f"[green]✓[/] {escape(label)} [dim]({time.monotonic() - started:.1f} s)[/]")


class _Advance:
    """What a `Stages.bar` block calls to move its bar on (a no-op without a terminal)."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress, self._task = progress, task

    def __call__(self, steps: int = 1) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, steps)
