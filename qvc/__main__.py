"""``python -m qvc``: the command line."""

from qvc.cli import run

run()
