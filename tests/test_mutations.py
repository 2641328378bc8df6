"""The mutation check of ``tests/mutations.py``: each of its mutations breaks one guarantee,
and the tests it names must catch it (fail) on a copy of the checkout."""

from __future__ import annotations

import pytest

from .mutations import MUTATIONS, Mutation, check, main


def test_there_are_mutations_for_the_guarantees_the_review_named() -> None:
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS) == 11  # the direct create is the 11th


@pytest.mark.slow
def test_every_mutation_is_caught_by_the_tests_that_protect_it() -> None:
    assert main([]) == 0


@pytest.mark.slow
def test_a_mutation_no_test_notices_is_reported_not_caught(capsys: pytest.CaptureFixture[str]) -> None:
    """The checker itself can fail: a change the named test cannot see is not caught."""
    harmless = Mutation(
        "harmless",
        "nothing: a comment",
        "evstore/_crypto.py",
        'SESSION_KEY_INFO = b"evstore/v1/session/"',
        'SESSION_KEY_INFO = b"evstore/v1/session/"  # a comment',
        ("tests/test_known_answers.py::test_each_input_of_the_derivation_changes_the_key",),
    )
    assert check((harmless,)) is False
    assert "harmless                 NOT CAUGHT (pytest exit 0)" in capsys.readouterr().out
