"""`mlts devices`: each driver's name, type, version, capabilities (and their source), extensions, cache files."""

from __future__ import annotations

import click

from mlts.commands._common import (
    capabilities_option,
    capabilities_options,
    driver_plugin_option,
    driver_socket_option,
    echo_json,
)


def _perf(info) -> str:
    return f"{{exec {info.exec_time:g}, power {info.power_usage:g}}}"


@click.command("devices")
@click.option(
    "--drivers", "drivers_regex", default=None, metavar="REGEX", help="Only drivers whose name matches."
)
@driver_plugin_option
@driver_socket_option
@capabilities_option
@click.option(
    "--ops",
    "show_ops",
    is_flag=True,
    help="Also ask each driver which operation x operand type combinations it supports "
    "(one probe model per combination NNAPI defines) and print the matrix.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def devices(
    drivers_regex: str | None,
    plugin_files: tuple[str, ...],
    driver_sockets: tuple[str, ...],
    capabilities_files: tuple[str, ...],
    show_ops: bool,
    as_json: bool,
) -> None:
    """List the available drivers and what each reports about itself.

    A driver that cannot be started or queried (a plugin whose factory fails,
    a service that does not answer) is listed as UNAVAILABLE with its reason;
    the others are still listed. Exit status: 0 when every listed driver
    answered, 1 when any is UNAVAILABLE (one line on stderr names them; the
    JSON is printed first with --json), 2 on bad input (a broken plugin file,
    no driver matching --drivers).
    """
    from mlts.hal.capabilities_file import describe_source
    from mlts.runtime.devices_info import query_all

    infos = query_all(
        drivers_regex,
        plugin_files,
        capabilities_options(capabilities_files),
        driver_sockets,
        coverage=show_ops,
    )
    if as_json:
        echo_json(infos)
        _exit_if_unavailable(infos)
        return
    for d in infos:
        if d.get("error"):
            click.echo(f"{d['name']}  ({d['source']})  UNAVAILABLE: {d['error']}")
            continue
        click.echo(f"{d['name']}  ({d['source']})")
        click.echo(f"  type {d['type']}, version {d['version']}")
        cf = d["cache_files_needed"]
        click.echo(f"  cache files needed: {cf['model']} model, {cf['data']} data")
        click.echo("  extensions:" + ("" if d["extensions"] else " none"))
        for e in d["extensions"]:
            types = ", ".join(
                f"{t['type']} ({'tensor' if t['is_tensor'] else 'scalar'}, {t['byte_size']} bytes)"
                for t in e["operand_types"]
            )
            click.echo(f"    {e['name']}: operand types {types or 'none'}")
        click.echo(f"  capabilities: {describe_source(d['capabilities_source'])}")
        caps = d["capabilities"]
        click.echo(
            f"  relaxed fp32->fp16: scalar {_perf_d(caps['relaxed_scalar'])}, tensor {_perf_d(caps['relaxed_tensor'])}"
        )
        click.echo(f"  if {_perf_d(caps['if'])}, while {_perf_d(caps['while'])}")
        groups: dict[str, list[str]] = {}
        for entry in caps["operand_performance"]:
            groups.setdefault(_perf_d(entry), []).append(entry["type"])
        for perf, type_names in groups.items():
            click.echo(f"  {perf}: {', '.join(type_names)}")
        if "coverage" in d:
            for line in coverage_lines(d["coverage"]):
                click.echo(line)
    _exit_if_unavailable(infos)


def _exit_if_unavailable(infos: list[dict]) -> None:
    """Status 1, with one line naming them, when any listed driver is UNAVAILABLE."""
    down = [d["name"] for d in infos if d.get("error")]
    if down:
        click.echo(
            f"mlts devices: {len(down)} of {len(infos)} drivers UNAVAILABLE: {', '.join(down)}", err=True
        )
        raise click.exceptions.Exit(1)


def coverage_lines(cov: dict) -> list[str]:
    """The coverage matrix as text: a summary, then per operation each type with yes/no."""
    if "error" in cov:
        return [f"  operations: coverage unknown: {cov['error']}"]
    lines = [f"  operations: {cov['supported']} of {cov['total']} operation x type combinations supported"]
    width = max(len(op) for op in cov["operations"])
    for op, types in cov["operations"].items():
        cells = ", ".join(f"{t.removeprefix('TENSOR_')} {'yes' if ok else 'no'}" for t, ok in types.items())
        lines.append(f"    {op:<{width}}  {cells}")
    return lines


def _perf_d(d: dict) -> str:
    return f"{{exec {d['exec_time']:g}, power {d['power_usage']:g}}}"
