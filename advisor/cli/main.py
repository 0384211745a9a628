"""Entry point of the `gpuadvisor` command: assembles the command groups (docs/design.md, "CLI").

Command groups are imported only when invoked: `gpuadvisor collector run` on a GPU node must not pay for (or need)
pandas, LightGBM and FastAPI, and `gpuadvisor --help` should answer at once.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import NoReturn

import typer
from rich.markup import escape
from typer import _click as click  # the click that Typer vendors; its classes are the ones TyperGroup derives from
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class _Entry:
    module: str
    attribute: str
    help: str


# Order is the order of `gpuadvisor --help`; each help short enough for its line at 80 columns.
COMMANDS: dict[str, _Entry] = {
    "up": _Entry("advisor.cli.up", "up", "Run store, advisor, simulated nodes and models locally."),
    "collector": _Entry("collector.cli", "app", "The node agent: GPU telemetry, pods, metrics, snapshots."),
    "profile": _Entry("advisor.cli.profile", "app", "Request and read trial-run profiles."),
    "profiler": _Entry("advisor.cli.profile", "profiler_app", "The TrialRun controller and job-history recorder."),
    "advisor": _Entry("advisor.cli.serve", "app", "The advisor service."),
    "models": _Entry("advisor.cli.models", "app", "Train, evaluate and list the prediction models."),
    "simulate": _Entry("advisor.cli.simulate", "simulate", "Replay a trace under placement policies and compare them."),
    "db": _Entry("advisor.cli.db", "app", "Manage the SQL store."),
}


def load_command(name: str) -> click.Command | None:
    """Import the module of command `name` and build its click command (a group for a Typer app)."""
    entry = COMMANDS.get(name)
    if entry is None:
        return None
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        command: click.Command = typer.main.get_group(target)
    else:
        single = typer.Typer()
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _as_subcommand(command)
    return command


COMPLETION_PARAMS = frozenset({"install_completion", "show_completion"})


def _as_subcommand(command: click.Command) -> None:
    """Shape `command` and everything under it as a subcommand of `gpuadvisor`: no shell-completion options (they
    belong to `gpuadvisor` itself, which completes every subcommand), and help as click lays it out (option, then
    its help wrapped beside it) rather than rich's boxed table, which at 80 columns cut option names short
    (`--advisor-prof…`) and gave flags a `<bool>` type."""
    command.params = [p for p in command.params if p.name not in COMPLETION_PARAMS]
    if isinstance(command, TyperCommand | TyperGroup):
        command.rich_markup_mode = None
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _as_subcommand(sub)


class LazyGroup(TyperGroup):
    """A Typer group whose subcommands are imported only when one is invoked.

    Listing them (help, completion) uses the one-line help of `COMMANDS` instead of importing every module.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        return None if entry is None else TyperCommand(cmd_name, help=entry.help)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, _placeholder, rest = super().resolve_command(ctx, args)
        return name, (load_command(name) if name else None), rest


app = typer.Typer(
    name="gpuadvisor",
    help="GPU telemetry, trial-run profiling and placement advice for Kubernetes.",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # the help layout of every subcommand too (`_as_subcommand`)
)


@app.callback()
def _root() -> None:
    """GPU telemetry, trial-run profiling and placement advice for Kubernetes."""


def main() -> None:
    """Run the command. Whatever the command, a usage error, a bad `GPUADVISOR_*` setting (exit 2) or a lost store
    or server connection (exit 3) ends as one `error:` line instead of a usage box or a traceback."""
    from pydantic import ValidationError

    from advisor.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, err_console, settings_error, unavailable_error

    def error(message: str, code: int) -> NoReturn:
        err_console.print(f"[bold red]error:[/] {escape(message)}")
        sys.exit(code)

    try:
        code = app(standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as e:  # a group without its command: the help (printed as it was
        if e.format_message().strip():  # built), exit 2 as click does
            click.echo(e.format_message())
        sys.exit(e.exit_code)
    except click.exceptions.UsageError as e:
        where = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
        error(f"{' '.join(e.format_message().split())}{where}", e.exit_code)  # click wraps its choices
    except click.exceptions.ClickException as e:
        error(e.format_message(), e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except ValidationError as e:
        if not e.title.endswith("Settings"):
            raise
        error(settings_error(e), EXIT_USAGE)
    except Exception as e:
        message = unavailable_error(e)
        if message is None:
            raise
        error(message, EXIT_UNAVAILABLE)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
