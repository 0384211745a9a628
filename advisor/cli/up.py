"""`gpuadvisor up`: the local all-in-one (SQLite store, advisor API), no cluster needed."""

from __future__ import annotations

from typing import Annotated

import typer

from advisor.cli.serve import build_settings, run_server


def up(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port of the advisor API.", min=1, max=65535)] = 8080,
    db_url: Annotated[str | None, typer.Option("--db", help="Database URL.")] = None,
) -> None:
    """Run everything locally: migrate the store and serve the advisor."""
    settings = build_settings(db_url, no_kube=True)
    typer.echo(f"gpuadvisor: advisor on http://{host}:{port} (API docs at /docs), store {settings.db_url}")
    run_server(settings, host, port)
