"""`mlts models`: the model zoo with family, dtype, input shape, parameter count and MACs."""

from __future__ import annotations

import click

from mlts.commands._common import echo_json

SYNTHETIC_NOTE = (
    "Weights are synthetic (seeded, with data-dependent BatchNorm statistics): no trained weights can be "
    "downloaded here, so latency is real but top-1 labels are not ImageNet classes."
)


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def models(as_json: bool) -> None:
    """List the zoo's models."""
    from mlts.models.zoo import list_models, summary

    rows = [summary(m.name) for m in list_models()]
    if as_json:
        echo_json({"models": rows, "note": SYNTHETIC_NOTE})
        return
    click.echo(f"{'name':<26} {'family':<14} {'dtype':<8} {'input':<16} {'params':>10} {'MACs':>12}")
    for r in rows:
        shape = "x".join(map(str, r["input_shape"]))
        click.echo(
            f"{r['name']:<26} {r['family']:<14} {r['dtype']:<8} {shape:<16} {r['params']:>10,} {r['macs']:>12,}"
        )
    click.echo("")
    click.echo(SYNTHETIC_NOTE)
