"""The ceiling: a minimal aiohttp loop sending the same chat requests, nothing else.

python benchmarks/bare_client.py URL CONCURRENCY PROMPTS.jsonl
"""

from __future__ import annotations

import asyncio
import json
import sys

import aiohttp


async def main(url: str, concurrency: int, path: str) -> None:
    with open(path, encoding="utf-8") as handle:
        prompts = [json.loads(line)["prompt"] for line in handle]
    queue = iter(prompts)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker() -> int:
            done = 0
            for prompt in queue:
                body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
                async with session.post(url, json=body) as resp:
                    await resp.json()
                done += 1
            return done

        counts = await asyncio.gather(*(worker() for _ in range(concurrency)))
    print(sum(counts), file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
