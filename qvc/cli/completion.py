"""``qvc completion``: the shell completion script (thread names come from
:func:`qvc.cli.app.complete_names`)."""

from __future__ import annotations

import click

from qvc.cli.app import cli


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script (thread names included).

    \b
    Example:
      eval "$(qvc completion bash)"
    """
    from click.shell_completion import get_completion_class  # deferred: start-up speed

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "qvc", "_QVC_COMPLETE").source())
