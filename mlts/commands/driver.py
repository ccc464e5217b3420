"""`mlts driver serve`: run one driver as a shared service in the foreground."""

from __future__ import annotations

import os

import click

from mlts.commands._common import BadInput, driver_plugin_option


def default_socket_path(name: str) -> str:
    """$XDG_RUNTIME_DIR/mlts/NAME.sock, or /tmp/mlts-UID/NAME.sock."""
    from mlts.ipc.socket_dir import default_socket_path as default

    return default(name)


@click.group("driver")
def driver() -> None:
    """Driver services."""


@driver.command("serve")
@click.argument("name")
@click.option(
    "--socket",
    "socket_path",
    default=None,
    type=click.Path(dir_okay=False),
    metavar="PATH",
    help="Listen here (default $XDG_RUNTIME_DIR/mlts/NAME.sock, else /tmp/mlts-UID/NAME.sock).",
)
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option for the driver's factory (repeatable), e.g. capabilities=FILE.json.",
)
@click.option(
    "--workers",
    default=2,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Executions the service runs at once (its worker pool).",
)
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="BLAS/OpenMP threads per execution in the service.",
)
@click.option(
    "--no-prevalidate",
    "no_prevalidate",
    is_flag=True,
    help="Hand models and requests to the driver without validating them first, so "
    "`mlts validate --driver-socket` tests the driver's own validation.",
)
@click.option(
    "--listen",
    "listen",
    multiple=True,
    metavar="tcp://HOST:PORT",
    help="Also serve clients of other machines here, over TLS (repeatable; port 0: the system chooses and "
    "the log says which).",
)
@click.option(
    "--tls-cert", metavar="FILE", type=click.Path(dir_okay=False), help="The service's certificate (PEM)."
)
@click.option(
    "--tls-key",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Its private key (default: in --tls-cert).",
)
@click.option(
    "--tls-client-ca",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Let in clients whose certificate this authority signed.",
)
@click.option(
    "--token-file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Let in clients presenting a token of FILE (lines SECRET or ID SECRET; mode 600).",
)
@click.option("--insecure", is_flag=True, help="Plaintext TCP without TLS: only on a loopback address.")
@driver_plugin_option
def serve(
    name: str,
    socket_path: str | None,
    options: tuple[str, ...],
    workers: int,
    threads: int,
    no_prevalidate: bool,
    listen: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    token_file: str | None,
    insecure: bool,
    plugin_files: tuple[str, ...],
) -> None:
    """Serve driver NAME to every client that connects to its socket, until Ctrl-C or SIGTERM.

    Clients are told apart by their connection (peer pid and uid); each one's
    prepared models, pools and fenced executions are its own and are released
    when it disconnects or dies. Point tools at it with --driver-socket PATH.
    The socket is created with mode 0600 and removed on exit. Its folder must be
    yours and writable by nobody else; the default folder is created with mode
    0700 (one that someone else created first is refused).

    With --listen tcp://HOST:PORT it also serves other machines, over TLS
    (--tls-cert, --tls-key), letting in only clients with a certificate signed by
    --tls-client-ca or a token of --token-file; tensors then travel inside the
    frames. Point tools at it with --driver-socket tcp://HOST:PORT --tls-ca CA
    --token-file FILE. Plaintext (--insecure) is served on loopback only.
    """
    from mlts.ipc.service.main import main as serve_main
    from mlts.runtime.discovery import discover, thread_env

    specs = discover(plugin_files)
    if name not in specs:
        raise BadInput(f"unknown driver {name!r}; available: {', '.join(sorted(specs)) or 'none'}")
    spec = specs[name]
    if spec.socket is not None:
        raise click.ClickException(f"driver {name!r} is already a service at {spec.socket}")
    for item in options:
        key, sep, _ = item.partition("=")
        if not sep or not key.isidentifier():
            raise click.BadParameter(f"{item!r} must look like KEY=VALUE", param_hint="--option")
    from mlts.ipc.socket_dir import UnsafeFolderError, secure_folder

    path = socket_path or default_socket_path(name)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        if socket_path is None or not os.path.exists(folder):
            secure_folder(folder)  # made here: this user's only (mode 0700), checked after creation
    except UnsafeFolderError as e:
        raise BadInput(str(e)) from None
    from mlts.ipc.net.listener import listen_config

    for where in listen:  # checked here, so a mistake is one line before anything starts
        listen_config(
            where,
            cert=tls_cert,
            key=tls_key,
            client_ca=tls_client_ca,
            token_file=token_file,
            insecure=insecure,
        )
    if not listen and (tls_cert or tls_key or tls_client_ca or token_file or insecure):
        raise BadInput("--tls-cert, --tls-key, --tls-client-ca, --token-file and --insecure go with --listen")
    # Set before the driver loads its math libraries, which read these once.
    os.environ.update(thread_env(threads))
    where_text = " and ".join([path, *listen])
    click.echo(f"serving {name} on {where_text} ({workers} workers); Ctrl-C stops", err=True)
    argv = ["--factory", spec.factory, "--name", name, "--socket", path, "--workers", str(workers)]
    for where in listen:
        argv += ["--listen", where]
    for flag, value in (
        ("--tls-cert", tls_cert),
        ("--tls-key", tls_key),
        ("--tls-client-ca", tls_client_ca),
        ("--token-file", token_file),
    ):
        if value:
            argv += [flag, value]
    if insecure:
        argv.append("--insecure")
    for item in options:
        argv += ["--option", item]
    if no_prevalidate:
        argv.append("--no-prevalidate")
    code = serve_main(argv)
    if code:
        raise click.ClickException(f"the service ended with status {code}; see the messages above")
