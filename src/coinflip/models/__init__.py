"""Model backends. `open_model` picks one from the config; all share the `Model` protocol."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from ..config import DEFAULT_BATCH, TaskConfig
from ..errors import ConfigError
from .base import Model, Reply, Request
from .baselines import NAMES as BASELINES

LOCAL_MODELS = ("smollm2",)  # names that start llama.cpp with a GGUF file shipped by a package

__all__ = ["BASELINES", "Model", "Reply", "Request", "open_model", "serve_local"]


@contextlib.contextmanager
def serve_local(config: TaskConfig, log_path: Path) -> Iterator[list[str] | None]:
    """Start llama.cpp for a local model (--model smollm2 or --model-path); else use --api-url."""
    if config.model_path or (config.model in LOCAL_MODELS and not config.api_url):
        from .llama_local import bundled_gguf, llama_server

        path = Path(config.model_path) if config.model_path else bundled_gguf(str(config.model))
        with llama_server(path.expanduser(), str(config.model), log_path) as url:
            yield [url]
        return
    if config.model in BASELINES:
        yield None
        return
    if not config.api_url:
        raise ConfigError(
            f"--model {config.model} needs --api-url (an OpenAI-compatible server), "
            "or use a baseline (oracle, random, always-yes, always-no) or smollm2"
        )
    yield [config.api_url] if isinstance(config.api_url, str) else list(config.api_url)


@contextlib.asynccontextmanager
async def open_model(config: TaskConfig, urls: list[str] | None) -> AsyncIterator[Model]:
    """The model for a run; for a server, its endpoints are checked (EndpointError) before it is handed out."""
    model: Model
    if urls is None:
        from .baselines import Baseline

        model = Baseline(str(config.model), config.seed)
    else:
        from .openai_api import OpenAIChat

        chat = OpenAIChat(
            str(config.model),
            urls,
            config.api_key,
            config.generation_config,
            config.timeout,
            config.retries,
            config.eval_batch_size or DEFAULT_BATCH,
            mode=config.api_mode,
            stream=bool(config.stream),
            max_reply_bytes=int(config.max_reply_mb * 1024 * 1024),
        )
        model = chat
        try:
            await chat.start()  # a wrong endpoint fails here, in seconds, before any sample is sent
        except BaseException:
            await chat.aclose()
            raise
    try:
        yield model
    finally:
        await model.aclose()
