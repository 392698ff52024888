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
