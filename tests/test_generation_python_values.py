"""--generation-config as EvalScope users write it: EvalScope evaluates each value as Python, so
do_sample=False, stream=True and stop=['a'] mean what they say here too (a literal, never code)."""

from __future__ import annotations

from coinflip import TaskConfig
from coinflip.config.values import parse_pairs


def test_python_spellings_of_values_are_read_as_evalscope_reads_them() -> None:
    assert parse_pairs("do_sample=False,stream=True,stop=['a', 'b']") == {
        "do_sample": False,
        "stream": True,
        "stop": ["a", "b"],
    }
    assert parse_pairs('extra_body={"chat_template_kwargs": {"enable_thinking": False}}') == {
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}
    }


def test_do_sample_false_is_greedy_and_stream_true_streams() -> None:
    config = TaskConfig.of(model="oracle", generation_config="do_sample=False,stream=True")
    assert config.generation_config == {"temperature": 0} and config.stream is True


def test_texts_that_are_not_python_stay_texts() -> None:
    assert parse_pairs("stop=[INST]") == {"stop": "[INST]"}
    assert parse_pairs("stop=__import__('os')") == {"stop": "__import__('os')"}


def test_python_spellings_of_numbers_are_numbers() -> None:
    """EvalScope's literal_eval reads temperature=.5 as 0.5 and max_tokens=1_000 as 1000: so does coinflip
    (refused before: 'temperature must be a number, got '.5'')."""
    assert parse_pairs("temperature=.5,top_p=-.9,max_tokens=1_000,seed=0x10") == {
        "temperature": 0.5,
        "top_p": -0.9,
        "max_tokens": 1000,
        "seed": 16,
    }
    assert TaskConfig.of(model="oracle", generation_config="temperature=.5").generation_config == {"temperature": 0.5}
    assert parse_pairs("stop=1j,reasoning_effort=.high") == {"stop": "1j", "reasoning_effort": ".high"}
