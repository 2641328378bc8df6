"""The sdist helper without network: a skip with the reason, or a failure when CI is set."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._sdist import sdist_tree


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVSTORE_SDIST_CACHE", str(tmp_path / "cache"))
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip may not reach any index: as without network
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))  # an empty directory
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
def test_without_network_it_skips_with_the_reason_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"could not download the sdist of pytest==[\d.]+ .*CI=true"):
        sdist_tree("pytest")


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
def test_without_network_it_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        sdist_tree("pytest")


def test_a_framework_that_is_not_installed_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        sdist_tree("no-such-distribution-evstore-test")
