"""The `gpuadvisor` command line (Typer): one module per command group, assembled in `main`."""
