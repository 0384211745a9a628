"""`python -m advisor.cli` runs the `gpuadvisor` command (used by tests and when the script is not on PATH)."""

from advisor.cli.main import main

main()
