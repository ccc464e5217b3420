"""`mlts models`: the model zoo with family, activation dtype, weights, input shape, parameter count and MACs."""

from __future__ import annotations

import click

from mlts.commands._common import echo_json

SYNTHETIC_NOTE = (
    "Weights are synthetic (seeded, with data-dependent BatchNorm statistics): no trained weights can be "
    "downloaded here, so latency is real but top-1 labels are not ImageNet classes. The _quant models are "
    "made from the float ones by onnxruntime's static quantization, calibrated on procedural images. "
    "asr_float and tts_float are LSTM models run one step per call with their state carried by the caller "
    "(MACs per step); the _sequence forms take a whole sequence (T = its length)."
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
    width = max(len(r["name"]) for r in rows)
    click.echo(
        f"{'name':<{width}} {'family':<13} {'dtype':<8} {'weights':<17} {'input':<14} {'params':>10} {'MACs':>12}"
    )
    for r in rows:
        shape = "x".join(str(d) if d else "T" for d in r["input_shape"])
        click.echo(
            f"{r['name']:<{width}} {r['family']:<13} {r['dtype']:<8} {r['weights']:<17} {shape:<14} "
            f"{r['params']:>10,} {r['macs']:>12,}"
        )
    click.echo("")
    click.echo(SYNTHETIC_NOTE)
