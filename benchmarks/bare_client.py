"""The ceiling: a minimal aiohttp loop sending the same chat requests, nothing else.

python benchmarks/bare_client.py URL CONCURRENCY PROMPTS.jsonl [stream]

With `stream`, it asks for server-sent events and joins the content deltas, line by line, as
the least a streaming client must do.
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


async def read_stream(resp: aiohttp.ClientResponse) -> str:
    parts = []
    async for line in resp.content:
        if line.startswith(b"data: ") and line[6:].strip() != b"[DONE]":
            for choice in json.loads(line[6:])["choices"]:
                parts.append(choice["delta"].get("content") or "")
    return "".join(parts)


async def main(url: str, concurrency: int, path: str, stream: bool) -> None:
    with open(path, encoding="utf-8") as handle:
        prompts = [json.loads(line)["prompt"] for line in handle]
    queue = iter(prompts)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> int:
            done = 0
            for prompt in queue:
                body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
                if stream:
                    body.update(stream=True, stream_options={"include_usage": True})
                async with session.post(url, json=body) as resp:
                    await (read_stream(resp) if stream else resp.json())
                done += 1
            return done

        counts = await asyncio.gather(*(worker() for _ in range(concurrency)))
    print(sum(counts), file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:] == ["stream"]))
