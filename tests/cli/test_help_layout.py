"""Every `--help` reads whole in an 80-column terminal: option names never cut (`--advisor-prof…`), flags without a
`<bool>` type, and the shell-completion options only on `gpuadvisor` itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.core import TyperGroup
from typer.testing import CliRunner

from advisor.cli.main import COMMANDS, app, load_command


def _command_paths() -> Iterator[tuple[str, ...]]:
    for name in COMMANDS:
        command = load_command(name)
        assert command is not None
        yield (name,)
        if isinstance(command, TyperGroup):
            for sub in command.commands:
                yield (name, sub)


def _help(*path: str) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("path", list(_command_paths()), ids=" ".join)
def test_help_fits_80_columns_without_cut_names_bool_types_or_completion_options(path: tuple[str, ...]) -> None:
    text = _help(*path)
    too_wide = [line for line in text.splitlines() if len(line) > 80]
    assert too_wide == []
    assert "…" not in text
    assert "<bool>" not in text
    assert "--install-completion" not in text
    assert "--show-completion" not in text
    assert "--help" in text


def test_only_gpuadvisor_itself_offers_shell_completion() -> None:
    text = _help()
    assert "--install-completion" in text
    commands = text.split("Commands:")[1]
    assert "..." not in commands  # every command's one-line help whole at 80 columns
