"""EvalScope's generation_config spellings beside coinflip's: one value each; an empty stop refused however given."""

from __future__ import annotations

from typing import Any

import pytest

from coinflip import TaskConfig
from coinflip.errors import ConfigError


@pytest.mark.parametrize(
    "generation", [{"stop_seqs": ["x"], "stop": ["y"]}, {"num_choices": 2, "n": 3}, {"num_choices": 2, "n": 2}]
)
def test_an_evalscope_alias_beside_its_coinflip_key_is_refused(generation: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="give one of"):
        TaskConfig.of(model="oracle", generation_config=generation)


@pytest.mark.parametrize("stop", ["", [""], "stop="])
def test_an_empty_stop_is_refused_as_a_text_or_in_a_list(stop: Any) -> None:
    generation = stop if stop == "stop=" else {"stop": stop}
    with pytest.raises(ConfigError, match="stop must be"):
        TaskConfig.of(model="oracle", generation_config=generation)


def test_the_aliases_alone_still_map() -> None:
    config = TaskConfig.of(model="oracle", generation_config={"stop_seqs": "x", "num_choices": 2})
    assert config.generation_config == {"stop": ["x"], "n": 2}
