"""``python -m qvc``: the command line."""

from .cli import run

run()
