"""Entry point of the `gpuadvisor` command: assembles the command groups of DESIGN §2."""

from __future__ import annotations

import typer

from advisor.cli import db, serve, up

app = typer.Typer(
    name="gpuadvisor",
    help="GPU telemetry, trial-run profiling and placement advice for Kubernetes.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db.app, name="db")
app.add_typer(serve.app, name="advisor")
app.command("up")(up.up)


def main() -> None:
    app()
