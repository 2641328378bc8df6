"""Fixtures for the tests against a real Ceph RADOS Gateway (RGW 16).

One throwaway gateway per lifecycle-day length is started for the whole test
session by ``infra/rgw.py`` (loaded with importlib: it is a script, not a
package) and stopped at the end. Where RGW cannot run (Ceph not installed, the
boot fails) the tests are skipped with the reason, except when ``CI=true``: CI
installs Ceph first, so there an unavailable RGW is a failure, never a skip.

The ``backend`` fixture here overrides tests/conftest.py's for this folder, so
the conformance suite of tests/test_backends.py runs again against RGW.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import boto3
import pytest
from botocore.config import Config

from evstore import ObjectStore, Store
from evstore._backends._s3 import S3Store

#: A lifecycle "day" lasts this many seconds on the default gateway (``rgw lc debug interval``).
LC_DAY_SECONDS = 10

_RGW_SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "rgw.py"


def unavailable(reason: str) -> NoReturn:
    """Skip locally; fail under CI (CI=true), where RGW must always run."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"RGW unavailable in CI: {reason}", pytrace=False)
    pytest.skip(f"RGW unavailable: {reason}")


def load_rgw_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("evstore_infra_rgw", _RGW_SCRIPT)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {_RGW_SCRIPT}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


class RgwGateways:
    """Starts at most one gateway per lifecycle-day length, lazily; stops them all at the end."""

    def __init__(self) -> None:
        self._module: ModuleType | None = None
        self._running: dict[int, Any] = {}
        self._failed: dict[int, str] = {}

    def get(self, lc_day_seconds: int) -> Any:
        """The RgwInfo of a gateway whose lifecycle day lasts ``lc_day_seconds``."""
        if lc_day_seconds in self._running:
            return self._running[lc_day_seconds]
        if lc_day_seconds in self._failed:
            unavailable(self._failed[lc_day_seconds])
        try:
            if self._module is None:
                self._module = load_rgw_module()
            info = self._module.start(None, None, lc_day_seconds, timeout=120.0)
        except Exception as exc:  # RgwError, a missing script, an OS error: all mean "no RGW here"
            self._failed[lc_day_seconds] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:500]}"
            unavailable(self._failed[lc_day_seconds])
        self._running[lc_day_seconds] = info
        return info

    def stop_all(self) -> None:
        errors = []
        for info in self._running.values():
            try:
                assert self._module is not None
                self._module.stop(info)
            except Exception as exc:
                errors.append(f"{info.dir}: {exc}")
        self._running.clear()
        if errors:
            raise RuntimeError("stopping RGW failed: " + "; ".join(errors))


@pytest.fixture(scope="session")
def rgw_gateways() -> Iterator[RgwGateways]:
    gateways = RgwGateways()
    try:
        yield gateways
    finally:
        gateways.stop_all()


@pytest.fixture(scope="session")
def rgw(rgw_gateways: RgwGateways) -> Any:
    """The shared gateway (RgwInfo: endpoint, access_key, secret_key, dir, ...), lifecycle day = 10 s."""
    return rgw_gateways.get(LC_DAY_SECONDS)


def rgw_client(info: Any, *, max_attempts: int = 3) -> Any:
    """A boto3 S3 client for the gateway with its own keys (the suite's env holds dummy ones)."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=info.endpoint,
        aws_access_key_id=info.access_key,
        aws_secret_access_key=info.secret_key,
        region_name=info.region,
        config=Config(
            retries={"mode": "standard", "max_attempts": max_attempts},
            connect_timeout=5,
            read_timeout=30,
            max_pool_connections=32,
            s3={"addressing_style": "path"},
        ),
    )


def rgw_bucket(info: Any) -> S3Store:
    """An S3Store on a new, empty bucket of the gateway."""
    client = rgw_client(info)
    name = f"evs-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return S3Store(name, endpoint_url=info.endpoint, client=client)


@pytest.fixture
def rgw_backend(rgw: Any) -> Iterator[S3Store]:
    backend = rgw_bucket(rgw)
    yield backend
    backend.close()


@pytest.fixture
def backend(rgw_backend: S3Store) -> ObjectStore:
    """Overrides the parametrized backend of tests/conftest.py: here it is always RGW."""
    return rgw_backend


@pytest.fixture
def rgw_store(rgw_backend: S3Store) -> Store:
    return Store(rgw_backend, root="root")


@pytest.fixture
def rgw_env(rgw: Any) -> dict[str, str]:
    """Environment for the command: the gateway's endpoint, keys and region (tests/conftest.py
    already removed AWS_ENDPOINT_URL_S3, EVSTORE_* and AWS_PROFILE from the environment)."""
    env: dict[str, str] = rgw.env()
    return env


@pytest.fixture
def new_rgw_bucket(rgw: Any) -> Callable[[], S3Store]:
    return lambda: rgw_bucket(rgw)
