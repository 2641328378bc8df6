#!/usr/bin/env python3
"""Render evstore's least-privilege IAM policies for one store (bucket + prefix).

The templates beside this file (``writer.json``, ``auditor.json``,
``operator.json``, ``lifecycle.json``) use three placeholders, spelled as CloudFormation's
``Fn::Sub`` spells them so that ``infra/cloudformation.yaml`` can carry the
very same strings (a test keeps the two in sync):

* ``${AWS::Partition}`` -- ``aws`` (``aws-cn``, ``aws-us-gov`` elsewhere)
* ``${Bucket}`` -- the bucket name
* ``${Prefix}`` -- the store root inside the bucket (``s3://bucket/<prefix>``)

Every object statement is scoped to ``<prefix>/sessions/*`` (the writer's
PutObject to event, manifest and fork-marker names under it) and every
``ListBucket`` to ``s3:prefix`` ``<prefix>/sessions/*``. Bucket-level actions
(lifecycle rules, listing multipart uploads) can only name the bucket: see
infra/README.md for what IAM cannot scope. An empty prefix (a
store opened as ``s3://bucket``) renders ``sessions/*``.

Usage::

    python infra/iam/render.py writer --bucket my-bucket --prefix evstore > writer.json
    aws iam create-policy --policy-name evstore-writer --policy-document file://writer.json

From Python (e.g. a test loading this file with importlib)::

    policy = render.render("auditor", bucket="my-bucket", prefix="evstore")

Stdlib only (Python 3.11+).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: The roles, each shipped as ``<role>.json`` beside this file.
ROLES = ("writer", "auditor", "operator", "lifecycle")
PARTITIONS = ("aws", "aws-cn", "aws-us-gov")

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z:]+)\}")


def template(role: str) -> dict[str, Any]:
    """The policy template of ``role``, placeholders unrendered."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: choose one of {', '.join(ROLES)}")
    document: dict[str, Any] = json.loads((HERE / f"{role}.json").read_text(encoding="utf-8"))
    return document


def _check(bucket: str, prefix: str, partition: str) -> str:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(f"{bucket[:70]!r} is not a valid bucket name")
    prefix = prefix.strip("/")
    if prefix and not all(_PREFIX_SEGMENT.fullmatch(part) and part not in (".", "..") for part in prefix.split("/")):
        # IAM matches '*' and '?' in resources and StringLike: a prefix may not carry them
        raise ValueError(f"prefix {prefix[:70]!r} must be '/'-separated segments of letters, digits, '.', '_' or '-'")
    if partition not in PARTITIONS:
        raise ValueError(f"unknown partition {partition!r}")
    return prefix


def _substitute(text: str, values: dict[str, str]) -> str:
    if not values["Prefix"]:
        text = text.replace("${Prefix}/", "")  # the root-less layout: keys start at sessions/

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"template placeholder ${{{name}}} has no value")
        return values[name]

    return _PLACEHOLDER.sub(one, text)


def _render_value(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _substitute(value, values)
    if isinstance(value, list):
        return [_render_value(item, values) for item in value]
    if isinstance(value, dict):
        return {key: _render_value(item, values) for key, item in value.items()}
    return value


def render(role: str, *, bucket: str, prefix: str, partition: str = "aws") -> dict[str, Any]:
    """The IAM policy document of ``role`` for the store ``s3://<bucket>/<prefix>``."""
    prefix = _check(bucket, prefix, partition)
    values = {"AWS::Partition": partition, "Bucket": bucket, "Prefix": prefix}
    rendered: dict[str, Any] = _render_value(template(role), values)
    return rendered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render an evstore IAM policy for one bucket and prefix.")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--prefix", default="evstore", help="the store root inside the bucket (default: evstore)")
    parser.add_argument("--partition", default="aws", choices=PARTITIONS)
    args = parser.parse_args(argv)
    try:
        policy = render(args.role, bucket=args.bucket, prefix=args.prefix, partition=args.partition)
    except ValueError as exc:
        parser.error(str(exc))
    json.dump(policy, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
