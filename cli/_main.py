"""The ``evstore`` command group: its global options (the store, the S3 endpoint, the network
options of ``_network``), the entry point ``main``, and every command module's commands
registered on it. How a failure becomes one line and an exit code is ``_common.Group``'s.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import evstore

from . import _audit, _doctor, _ecosystem, _proofs, _read, _retention, _write
from ._common import STORE_MAKING_COMMANDS, Context, Group, not_empty
from ._network import network_options, open_options


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--store",
    "store_url",
    envvar="EVSTORE_STORE",
    metavar="URL",
    callback=not_empty,
    help="s3://bucket[/root], file:///path or memory:// (default: $EVSTORE_STORE, else a local data directory).",
)
@click.option(
    "--endpoint-url",
    envvar="AWS_ENDPOINT_URL",
    metavar="URL",
    callback=not_empty,
    help="S3 endpoint for MinIO, Ceph, moto or any S3-compatible server (default: $AWS_ENDPOINT_URL).",
)
@network_options
@click.version_option(evstore.__version__, prog_name="evstore")
@click.pass_context
def cli(ctx: click.Context, /, store_url: str | None, endpoint_url: str | None, **network: Any) -> None:
    """evstore: conversation sessions as an append-only log on S3-compatible storage.

    Exit codes: 0 success, 1 unexpected failure, 2 usage or invalid input,
    3 session not found, 4 write conflict, 5 integrity failure, 6 session expired.
    """
    state = Context(store_url, endpoint_url, open_options(**network), makes_store=ctx.invoked_subcommand in STORE_MAKING_COMMANDS)
    ctx.obj = state
    ctx.call_on_close(state.close)


def main() -> None:
    _open_closed_streams()
    cli(prog_name="evstore")


def _open_closed_streams() -> None:
    """A standard stream closed when the command starts (``2>&-``, ``>&-``) is None in ``sys``:
    it becomes the null device, so reads find nothing and writes go nowhere (what ``click.echo``
    does with no stream) instead of failing on None."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))  # noqa: SIM115  # open for the life of the process


for _module in (_audit, _doctor, _ecosystem, _proofs, _read, _retention, _write):
    _module.register(cli)
