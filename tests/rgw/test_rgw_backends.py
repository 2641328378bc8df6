"""The backend conformance suite of tests/test_backends.py, against Ceph RGW.

The star import collects the very same test functions again in this module;
tests/rgw/conftest.py overrides ``backend`` so each of them gets an S3Store on
a fresh RGW bucket.
"""

from __future__ import annotations

import pytest

from tests.test_backends import *  # noqa: F403

pytestmark = pytest.mark.rgw
