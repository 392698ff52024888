"""limit as EvalScope's TaskConfig reads it (parse_int_or_float): a whole float is a count, a fraction a ratio."""

from __future__ import annotations

import pytest

from coinflip import TaskConfig


@pytest.mark.parametrize(("given", "read"), [(1.0, 1), ("1.0", 1), (3.0, 3), (0.5, 0.5), (0, None), (0.0, None)])
def test_a_whole_float_limit_is_a_count_and_a_fraction_a_ratio(given: object, read: object) -> None:
    assert TaskConfig.of(model="oracle", limit=given).limit == read
