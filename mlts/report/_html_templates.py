"""The report's jinja2 templates (mlts/report/templates): autoescaped, strict about undefined names."""

from __future__ import annotations

from functools import cache

import jinja2


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("mlts.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def template(name: str) -> jinja2.Template:
    """The template `name` (e.g. "report.html.j2"); every page extends base.html.j2."""
    return _environment().get_template(name)
