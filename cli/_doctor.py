"""``evstore doctor``: one line per check of the configured store, a hint for each failure;
exit 0 only when every check passes, else 1. The checks are ``evstore._doctor``'s.

Imports ``_common`` only (no other cli module imports this one but ``_main``).
"""

from __future__ import annotations

import click

from evstore._doctor import diagnose

from ._common import Context, pass_context, say, say_json

_LABEL = {"ok": "ok", "fail": "FAIL", "skip": "skip"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"ok": ..., "checks": [...]}.')
@pass_context
def doctor(state: Context, as_json: bool) -> None:
    """Check the store URL, credentials, bucket, If-None-Match, keys and lifecycle rules.

    Writes one scratch object (a conditional-create probe under the store root) and removes it.
    Exit 0 only when every check passes, else 1.
    """
    report = diagnose(state.store_url, endpoint_url=state.endpoint_url, **state.network)
    if as_json:
        say_json({"ok": report.ok, "checks": report.checks})
    else:
        for check in report.checks:
            hint = f" (hint: {check.hint})" if check.status == "fail" and check.hint else ""
            say(f"{_LABEL[check.status]:<4}  {check.name}: {check.detail}{hint}")
    if not report.ok:
        raise SystemExit(1)


def register(cli: click.Group) -> None:
    cli.add_command(doctor)
