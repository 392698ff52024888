"""A local stand-in for the Hugging Face Hub's HTTP API, serving a folder as a dataset repo.

It answers the calls huggingface_hub's `snapshot_download` makes (repo info, tree listing,
HEAD and GET on resolve URLs), so the real client runs against it through HF_ENDPOINT.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, root: Path, repo_id: str) -> None:
        self.files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        self.oids = {k: hashlib.sha1(v).hexdigest() for k, v in self.files.items()}
        self.repo_id = repo_id
        self.hits: list[tuple[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _info(self, request: web.Request) -> web.Response:
        self.hits.append(("info", request.path))
        siblings = [{"rfilename": k} for k in self.files]
        return web.json_response({"id": self.repo_id, "sha": COMMIT, "private": False, "siblings": siblings})

    async def _tree(self, request: web.Request) -> web.Response:
        self.hits.append(("tree", request.path))
        entries = [{"type": "file", "path": k, "size": len(v), "oid": self.oids[k]} for k, v in self.files.items()]
        return web.json_response(entries)

    async def _resolve(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.hits.append((request.method, path))
        if path not in self.files:
            return web.Response(status=404, headers={"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{self.oids[path]}"'}
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(self.files[path]))})
        return web.Response(body=self.files[path], headers=headers)

    async def _start(self) -> str:
        app = web.Application()
        base = "/api/datasets/{owner}/{name}"
        app.router.add_get(base + "/revision/{rev}", self._info)
        app.router.add_get(base + "/tree/{rev}", self._tree)
        app.router.add_get(base + "/tree/{rev}/{path:.*}", self._tree)
        app.router.add_route("*", "/datasets/{owner}/{name}/resolve/{rev}/{path:.*}", self._resolve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    def __enter__(self) -> FakeHub:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
