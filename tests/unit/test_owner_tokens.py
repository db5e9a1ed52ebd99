"""Owner tokens: unique in a process and across processes, forked ones included."""

from __future__ import annotations

import multiprocessing
import os
import string
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from idempotent_lambda._identity import new_owner


def _tokens(count: int) -> list[str]:
    return [new_owner() for _ in range(count)]


def test_tokens_drawn_from_many_threads_are_all_distinct() -> None:
    """32 hex characters each, and no two alike, however the threads interleave."""
    with ThreadPoolExecutor(8) as pool:
        tokens = [t for chunk in pool.map(_tokens, [2_000] * 8) for t in chunk]
    assert 16_000 == len(set(tokens))
    assert all(32 == len(t) and set(t) <= set(string.hexdigits.lower()) for t in tokens)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_a_forked_child_draws_tokens_of_its_own() -> None:
    """A child forked after the parent drew tokens does not repeat the parent's next ones."""
    parent_before = new_owner()
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        child = pool.apply(_tokens, (3,))
    parent_after = _tokens(3)
    assert not set(child) & {parent_before, *parent_after}
    assert {t[:20] for t in child} != {parent_before[:20]}  # a fresh random part
