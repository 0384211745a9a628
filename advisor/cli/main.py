"""Entry point of the `gpuadvisor` command: assembles the command groups of DESIGN §2."""

from __future__ import annotations

import typer

from advisor.cli import db, serve, up
from advisor.cli import models as models_cli
from advisor.cli import profile as profile_cli
from advisor.cli import simulate as simulate_cli
from collector.cli import app as collector_app

app = typer.Typer(
    name="gpuadvisor",
    help="GPU telemetry, trial-run profiling and placement advice for Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(serve.app, name="advisor")
app.add_typer(collector_app, name="collector")
app.add_typer(profile_cli.app, name="profile")
app.add_typer(profile_cli.profiler_app, name="profiler")
app.add_typer(models_cli.app, name="models")
app.command("up")(up.up)
app.command("simulate")(simulate_cli.simulate)


def main() -> None:
    app()
