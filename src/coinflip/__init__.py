"""coinflip: fast, trustworthy CoinFlip evaluation of language models.
`run_task(TaskConfig(model="oracle", limit=10))`; names are imported on first use, so `import coinflip` is instant."""

TYPE_CHECKING = False  # not typing's: `import coinflip` imports nothing, so the command's first code runs at once

_LAZY = {
    "EvalType": "config",
    "TaskConfig": "config",
    "run_task": "run.runner",
    "rescore": "run.runner",
    "extract_answer": "scoring.extract",
    "generate_file": "data.generate",
    "load_dataset": "data.load",
}
__all__ = [*_LAZY, "__version__"]  # the names are the type checker's by their `X as X` imports below

if TYPE_CHECKING:
    from typing import Any

    from .config import EvalType as EvalType
    from .config import TaskConfig as TaskConfig
    from .data.generate import generate_file as generate_file
    from .data.load import load_dataset as load_dataset
    from .run.runner import rescore as rescore
    from .run.runner import run_task as run_task
    from .scoring.extract import extract_answer as extract_answer

    __version__: str


def __getattr__(name: str) -> "Any":  # a string: Any is imported for the type checker only
    if name == "__version__":  # pyproject.toml's, from the installed package's metadata
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("coinflip")
        except PackageNotFoundError:  # a source tree on the path, not installed
            return "0+unknown"
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'coinflip' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f".{module}", __name__), name)
