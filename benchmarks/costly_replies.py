"""What a reply that costs more than its bytes costs a run. `python benchmarks/costly_replies.py`

A server on 127.0.0.1 answers every request with 15.5 MB (under the 16 MB reply cap) made of
what is cheap to send and dear to read: a stream of tiny `data: {}` events, or a JSON body of
small objects. `coinflip eval` sends 8 such requests at once; each sample must fail on its own,
quickly, and the run's peak RSS must stay near a normal run's, not grow with what the replies
would build (before the limits on events and JSON values: 264 MB and 7.5 s for one stream,
1.74 GB and 53 s for eight; 459 MB for one body). Prints each figure as measured / target.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import COINFLIP, PY, Server, row  # noqa: E402

CAP_MB = 16  # --max-reply-mb's default
SIZE = int(15.5 * 1024 * 1024)
IN_FLIGHT = 8


def tiny_stream() -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + b"data: {}\n\n" * (SIZE // 10)


def small_objects() -> bytes:
    head = b'{"choices": [{"index": 0, "message": {"content": "ANSWER: YES"}}], "pad": ['
    body = head + b"{}," * (SIZE // 3) + b"{}]}"
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


class CostlyServer:
    """Answers each request with `reply` and hangs up (a close-delimited stream needs it)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = reader.readline()
                if not line:
                    return
                head += line
            reader.read(body_length(head))
            with contextlib.suppress(OSError):  # the client gave up on the reply, as it should
                conn.sendall(self.reply)

    def close(self) -> None:
        self.sock.close()


def body_length(head: bytes) -> int:
    """The request body's length; 0 when the head has no Content-Length (a GET such as /props)."""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or 0)
    return 0


def run(url: str, work: Path, *extra: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of `coinflip eval` with IN_FLIGHT requests at once."""
    wrapper = (
        "import resource,subprocess,sys,time;t=time.perf_counter();"
        "subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL);"
        "print(time.perf_counter()-t,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024)"
    )
    command = [COINFLIP, "eval", "--model", "m", "--no-html", "--api-url", url, "--limit", str(IN_FLIGHT)]
    command += ["--eval-batch-size", str(IN_FLIGHT), "--retries", "0", "--work-dir", str(work), *extra]
    out = subprocess.run([PY, "-c", wrapper, *command], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def main(lines: list[str] | None = None) -> None:
    """Appends each figure to `lines` (bench.py's, which prints as it goes), else prints it."""
    out = lines if lines is not None else Printed()
    tmp = Path(tempfile.mkdtemp(prefix="coinflip-costly-"))
    normal = Server()
    try:
        _, base = run(normal.url, tmp / "normal", "--stream")
    finally:
        normal.stop()
    out.append(f"a normal run of {IN_FLIGHT} streamed samples: peak RSS {base:.0f} MB")
    cases = (("tiny-event stream", tiny_stream, ["--stream"]), ("small JSON objects", small_objects, []))
    for name, reply, extra in cases:
        server = CostlyServer(reply())
        try:
            wall, rss = run(server.url, tmp / name.replace(" ", "-"), *extra)
        finally:
            server.close()
        out.append(f"15.5 MB of {name}, {IN_FLIGHT} in flight: {wall:.2f} s, peak RSS {rss:.0f} MB")
        target = 2 * IN_FLIGHT * CAP_MB  # a small multiple of what the replies may hold: in-flight x the cap
        out.append(row(f"peak RSS over a normal run, {name} x {IN_FLIGHT} (MB)", rss - base, target, "MB"))
    shutil.rmtree(tmp, ignore_errors=True)


class Printed(list[str]):
    def append(self, line: str) -> None:
        print(line, flush=True)
        super().append(line)


if __name__ == "__main__":
    main()
