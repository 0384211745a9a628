"""Shared CLI conventions: exit codes and one-line error messages instead of tracebacks."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: message` on stderr and exit with `code` (2: bad input, 3: a needed resource is missing)."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(code)
