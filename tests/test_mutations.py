"""The mutation check of ``tests/mutations.py``: each of its mutations breaks one guarantee,
and the tests it names must catch it (fail) on a copy of the checkout."""

from __future__ import annotations

import pytest

from .mutations import MUTATIONS, main


def test_there_are_mutations_for_the_guarantees_the_review_named() -> None:
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS) == 11  # the direct create is the 11th


@pytest.mark.slow
def test_every_mutation_is_caught_by_the_tests_that_protect_it() -> None:
    assert main([]) == 0
