"""coinflip: fast, trustworthy CoinFlip evaluation of language models.

    from coinflip import run_task, TaskConfig
    report = run_task(TaskConfig(model="oracle", datasets=["coin_flip"], limit=10))

Names are imported on first use so that `import coinflip` stays instant.
"""

TYPE_CHECKING = False  # not typing's: `import coinflip` imports nothing, so the command's first code runs at once

__version__ = "0.1.0"
__all__ = [
    "EvalType",
    "TaskConfig",
    "extract_answer",
    "run_task",
    "rescore",
    "generate_file",
    "load_dataset",
    "__version__",
]

_LAZY = {
    "EvalType": "_evalscope",
    "TaskConfig": "config",
    "run_task": "run.runner",
    "rescore": "run.runner",
    "extract_answer": "scoring.extract",
    "generate_file": "data.generate",
    "load_dataset": "data.load",
}

if TYPE_CHECKING:
    from typing import Any

    from ._evalscope import EvalType
    from .config import TaskConfig
    from .data.generate import generate_file
    from .data.load import load_dataset
    from .run.runner import rescore, run_task
    from .scoring.extract import extract_answer


def __getattr__(name: str) -> "Any":  # a string: Any is imported for the type checker only
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'coinflip' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
