"""Options and helpers shared by several commands."""

from __future__ import annotations

import json

import click

driver_plugin_option = click.option(
    "--driver-plugin",
    "plugin_files",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE.py",
    help="A Python file defining a Device subclass to load as a driver (repeatable).",
)


def echo_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2))


def progress(message: str) -> None:
    """Progress lines go to stderr so stdout stays machine-readable."""
    click.echo(f"  {message}", err=True)
