"""limit 1.0 is EvalScope's fraction of the whole set (int(len(dataset) * 1.0)), not one question."""

from __future__ import annotations

import pytest

from coinflip import TaskConfig


@pytest.mark.parametrize("limit", [1.0, "1.0", "1e0"])
def test_a_limit_of_one_as_a_fraction_is_every_question(limit: object) -> None:
    assert TaskConfig.of(model="oracle", limit=limit).limit is None


def test_a_limit_of_one_as_a_whole_number_is_one_question() -> None:
    assert TaskConfig.of(model="oracle", limit=1).limit == 1
    assert TaskConfig.of(model="oracle", limit="1").limit == 1
