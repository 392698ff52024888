"""A wrong endpoint stops the run in seconds with one line and exit 2; a broken one (every first
request failing alike) stops it early with exit 1, resumable; what the server said is kept."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, QuietHandler, Seen, answer, chat, content_length, read_head, serving
from .conftest import PATIENCE_S, only_run_dir, read_jsonl, run_cli

FAST = 15.0  # seconds: a Python start, a config check and a refused connection, on a loaded machine


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed_eval(url: str, tmp: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[Any, float]:
    started = time.monotonic()
    result = run_cli("eval", "--model", "m", "--api-url", url, "--limit", "3", "--work-dir", str(tmp), *extra, env=env)
    return result, time.monotonic() - started


def one_line(result: Any) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return str(lines[0])


def test_nothing_listening_fails_in_seconds(tmp_path: Path) -> None:
    port = closed_port()
    result, elapsed = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path)
    assert result.returncode == 2 and elapsed < FAST
    assert f"nothing is listening at http://127.0.0.1:{port} (connection refused)" in one_line(result)


def test_a_resume_that_finds_no_server_leaves_the_run_as_it_was(tmp_path: Path) -> None:
    """Its saved settings (their resumed date) and a larger --limit's subset, which its old report does not cover,
    change only once a reply could land."""
    with FakeOpenAIServer("correct") as srv:
        first = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "4", "--work-dir", str(tmp_path))
    assert first.returncode == 0
    run = only_run_dir(tmp_path)
    saved = {name: (run / "configs" / name).read_bytes() for name in ("task_config.yaml", "subset.json")}
    gone = f"http://127.0.0.1:{closed_port()}/v1"
    result = run_cli("eval", "--use-cache", str(run), "--limit", "9", "--api-url", gone)
    assert result.returncode == 2 and "nothing is listening" in one_line(result)  # no note of a wider run
    assert {name: (run / "configs" / name).read_bytes() for name in saved} == saved
    with FakeOpenAIServer("correct") as srv:  # and it resumes as it would have
        again = run_cli("eval", "--use-cache", str(run), "--limit", "9", "--api-url", srv.url)
    assert again.returncode == 0 and "covers 9 questions (it covered 4)" in again.stderr
    assert len(read_jsonl(run / "predictions" / "m" / "coin_flip.jsonl")) == 9


def test_a_run_into_its_own_folder_that_never_got_going_leaves_nothing(tmp_path: Path) -> None:
    """--no-timestamp: the run's lock and its empty predictions file stayed behind, which `view` lists as a
    foreign folder ('looks like a run folder but has no configs/task_config.yaml')."""
    result, _ = timed_eval(f"http://127.0.0.1:{closed_port()}/v1", tmp_path, "--no-timestamp")
    assert result.returncode == 2 and "nothing is listening" in one_line(result)
    assert [p for p in tmp_path.rglob("*") if not p.is_dir()] == []
    assert " 0 foreign" in run_cli("view", str(tmp_path)).stderr


def test_an_unknown_host_fails_in_seconds(tmp_path: Path) -> None:
    """`.invalid` never resolves (RFC 6761), so no query leaves the machine."""
    result, elapsed = timed_eval("http://no-such-server.invalid:8000/v1", tmp_path)
    assert result.returncode == 2 and elapsed < FAST
    assert "cannot resolve host 'no-such-server.invalid'" in one_line(result)


def test_an_untrusted_certificate_fails_in_seconds_and_names_ssl_cert_file(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]

        def handshake() -> None:
            conn, _ = sock.accept()
            with conn, contextlib.suppress(OSError):
                context.wrap_socket(conn, server_side=True)

        threading.Thread(target=handshake, daemon=True).start()
        result, elapsed = timed_eval(f"https://127.0.0.1:{port}/v1", tmp_path)
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert "TLS certificate verification failed" in line and "SSL_CERT_FILE" in line


def test_a_proxy_that_is_down_is_named_as_the_proxy(tmp_path: Path) -> None:
    port = closed_port()
    env = {"HTTP_PROXY": f"http://user:hunter2pw@127.0.0.1:{port}"}  # the only way out: nothing leaves
    result, elapsed = timed_eval("http://api.example.invalid/v1", tmp_path, env=env)
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert f"proxy 127.0.0.1:{port} is unreachable (connection refused)" in line and "hunter2pw" not in line


def test_an_https_proxy_url_never_shows_its_password(tmp_path: Path) -> None:
    env = {"HTTPS_PROXY": "https://user:hunter2pw@proxy.example.invalid:3128"}
    result, _ = timed_eval("https://api.example.invalid/v1", tmp_path, env=env)
    assert result.returncode == 2
    line = one_line(result)
    assert "give an http:// proxy URL" in line and "hunter2pw" not in line


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ("http://user:hunter2pw@proxy.invalid:3128", "proxy proxy.invalid:3128 is unreachable (unknown host: "),
        ("http://user:hunter2pw@[::1", "proxy 'http://[::1' is not a URL (Invalid IPv6 URL)"),
        ("http://user:hunter2pw@proxy host:3128", "proxy 'http://proxy host:3128': 'proxy host' is not a host name"),
        ("http://user:hunter2pw@proxy\x01:3128", "proxy 'http://proxy\\x01:3128': 'proxy\\x01' is not a host name"),
    ],
)
def test_a_proxy_that_cannot_be_reached_or_read_is_one_line(proxy: str, message: str, tmp_path: Path) -> None:
    """A proxy's unknown name was blamed on the server's (its look-up is the proxy's); a proxy URL
    that is no URL, or whose host holds a space or control character, ended in a traceback."""
    result, elapsed = timed_eval("https://api.example.com/v1", tmp_path, env={"HTTPS_PROXY": proxy})
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert message in line and "hunter2pw" not in line


def test_a_plain_http_proxy_answering_407_stops_the_run(tmp_path: Path) -> None:
    with AnswerServer(lambda s: answer({"error": "auth"}, 407, "Proxy-Authenticate: Basic")) as proxy:
        result, elapsed = timed_eval("http://api.example.invalid/v1", tmp_path, env={"HTTP_PROXY": proxy.url})
        assert proxy.seen and proxy.seen[0].path == "http://api.example.invalid/v1/chat/completions"
    assert result.returncode == 2 and elapsed < FAST
    assert "proxy wants credentials (407" in one_line(result)


def _echoing_proxy(conn: socket.socket) -> None:
    """A proxy that refuses every request with a 502 whose text is the request it got (headers
    included), and every CONNECT with garbage holding its password, as a debugging gateway might."""
    with conn, contextlib.suppress(OSError):
        got = conn.recv(65536)
        if got.startswith(b"CONNECT"):
            conn.sendall(b"garbage for hunter2pw\r\n\r\n")
            return
        conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(got) + got)


@pytest.mark.parametrize("mode", ["http", "https", "https-batch"])
def test_a_proxy_echoing_its_credentials_never_gets_them_into_a_file_or_the_terminal(mode: str, tmp_path: Path) -> None:
    """The proxy URL's password is a run's secret too: it travels as Proxy-Authorization (Basic,
    base64) on each plain request and on a CONNECT, and a proxy that echoed either put it into the
    predictions, the log and the error line."""
    token = base64.b64encode(b"user:hunter2pw").decode()
    with listening(_echoing_proxy) as port:
        proxy = f"http://user:hunter2pw@127.0.0.1:{port}"
        url = "http://api.example.com/v1" if mode == "http" else "https://api.example.com/v1"
        extra = ("--retries", "0", *(("--batch",) if mode.endswith("batch") else ()))
        result, _ = timed_eval(url, tmp_path, *extra, env={"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy})
    assert result.returncode == (1 if mode == "http" else 2) and "Traceback" not in result.stderr  # 502s; CONNECT
    shown = result.stdout + result.stderr
    saved = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert "***" in shown + saved  # the proxy's words were kept, its credentials masked
    assert "hunter2pw" not in shown + saved and token not in shown + saved


@contextlib.contextmanager
def listening(handle: Any) -> Iterator[int]:
    """A raw TCP server on 127.0.0.1 that runs `handle(conn)` for each connection; yields its port."""
    with socket.create_server(("127.0.0.1", 0)) as sock:

        def accept() -> None:
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        yield sock.getsockname()[1]


def _tls_only(context: ssl.SSLContext, alert: bool = False) -> Any:
    """A TLS server that hangs up on plain HTTP unanswered, as OpenSSL does, or (`alert`) first
    sends a TLS alert record, as other TLS stacks do."""

    def handle(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if alert and conn.recv(1, socket.MSG_PEEK) != b"\x16":  # not a handshake: plain HTTP
                conn.sendall(b"\x15\x03\x03\x00\x02\x02\x46")  # fatal alert, protocol_version
                return
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)

    return handle


def _plain_http_answering_400(conn: socket.socket) -> None:
    """As nginx and uvicorn do when a TLS handshake reaches their plain HTTP port."""
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


def test_the_wrong_scheme_fails_in_seconds_either_way(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    with (
        listening(_tls_only(context)) as tls_port,
        listening(_tls_only(context, alert=True)) as alerting_port,
        listening(_plain_http_answering_400) as http_port,
    ):
        plain, plain_s = timed_eval(f"http://127.0.0.1:{tls_port}/v1", tmp_path / "a")
        alerted, alerted_s = timed_eval(f"http://127.0.0.1:{alerting_port}/v1", tmp_path / "c")
        secure, secure_s = timed_eval(f"https://127.0.0.1:{http_port}/v1", tmp_path / "b")
    for result, elapsed, port in ((plain, plain_s, tls_port), (alerted, alerted_s, alerting_port)):
        assert result.returncode == 2 and elapsed < FAST
        assert f"speaks TLS: use https://127.0.0.1:{port} in --api-url" in one_line(result)
    assert secure.returncode == 2 and secure_s < FAST
    assert f"https://127.0.0.1:{http_port}: TLS handshake failed" in one_line(secure)


@pytest.mark.parametrize("alert", [False, True], ids=["hangs-up", "alerts"])
def test_the_wrong_scheme_is_told_in_batch_mode_too(alert: bool, tmp_path: Path) -> None:
    """The Batch API's calls take the online requests' test: http:// to a TLS server was retried
    and ended with exit 1 and a connection reset, asking to resume a run that cannot work."""
    trustme = pytest.importorskip("trustme")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("127.0.0.1").configure_cert(context)
    with listening(_tls_only(context, alert)) as port:
        result, _ = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path, "--batch", "--batch-poll-s", "0.05")
    assert result.returncode == 2
    assert f"speaks TLS: use https://127.0.0.1:{port} in --api-url" in one_line(result)


def test_https_to_a_plain_server_that_waits_for_a_request_fails_well_before_the_timeout(tmp_path: Path) -> None:
    """The test server, like Python's http.server, waits for a request's blank line that a TLS
    handshake never sends: the check before the run gives a handshake 10 s, not --timeout (120 s)."""
    with FakeOpenAIServer("correct") as srv:
        result, elapsed = timed_eval(f"https://127.0.0.1:{srv.port}/v1", tmp_path)
    assert result.returncode == 2 and elapsed < 60
    assert one_line(result).endswith(
        f"https://127.0.0.1:{srv.port} takes a connection but no TLS handshake within 10 s; is it an https:// "
        "server? - check --api-url"
    )


def test_a_connection_that_never_opens_fails_within_the_timeout(tmp_path: Path) -> None:
    """A full listen queue drops the SYN, as a non-routable address (10.255.255.1) would."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        port = full.getsockname()[1]
        waiting = [socket.socket() for _ in range(3)]
        for sock in waiting:
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
        try:
            result, elapsed = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path, "--timeout", "1")
        finally:
            for sock in waiting:
                sock.close()
    assert result.returncode == 2 and elapsed < FAST
    assert f"no connection to http://127.0.0.1:{port} within 1 s - check --api-url" in one_line(result)


def _silent(conn: socket.socket) -> None:
    with conn:
        conn.recv(65536)
        time.sleep(10)


def test_a_proxy_that_never_answers_connect_is_named(tmp_path: Path) -> None:
    with listening(_silent) as port:
        env = {"HTTPS_PROXY": f"http://127.0.0.1:{port}"}
        result, elapsed = timed_eval("https://api.example.invalid/v1", tmp_path, "--timeout", "1", env=env)
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert f"https://api.example.invalid:443 through proxy 127.0.0.1:{port} within 1 s" in line
    assert line.endswith("check --api-url and HTTP_PROXY / HTTPS_PROXY / NO_PROXY")


def test_a_wrong_path_answered_by_a_web_servers_404_page_fails_in_seconds(tmp_path: Path) -> None:
    page = b"<html><head><title>404 Not Found</title></head><body><center><h1>404 Not Found</h1></center></body></html>"
    with AnswerServer(lambda s: answer(None, 404, "Content-Type: text/html", raw=page)) as srv:
        result, elapsed = timed_eval(srv.url.replace("/v1", "/wrong/v1"), tmp_path)
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert line.endswith("/wrong/v1/chat/completions answered 404 not found: 404 Not Found (an HTML page) - "
                         "check --model and --api-url")  # fmt: skip


@pytest.mark.parametrize(
    "body", [{"status": "ok", "version": "1.2"}, ["ok"], None]
)  # None: `null`, retried as malformed
def test_a_server_answering_json_that_is_no_completion_is_a_wrong_endpoint(body: Any, tmp_path: Path) -> None:
    """--api-url at another JSON API (a health check, a catch-all stub) that answers 200 to any POST: each
    request was retried as a malformed body, and the run ended 'broken' (exit 1, resume once the server is
    fixed) after some 50 requests, where a web page in its place is named a wrong --api-url at once."""
    with AnswerServer(lambda s: answer(body)) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path, "--limit", "20", "--eval-batch-size", "2")
        posts = sum(1 for s in srv.seen if s.body)
    assert result.returncode == 2 and elapsed < FAST and posts <= 2, result.stderr
    line = one_line(result)
    assert f"/v1/chat/completions answered with JSON that is no completion: {json.dumps(body)}" in line, line
    assert "check --api-url" in line


def _error_object_once(failed: list[bool]) -> Callable[[Seen], bytes]:
    """Answers, but the first request gets vLLM's error object in a 200 (as gateways pass it on); `failed` notes it."""

    def reply(seen: Seen) -> bytes:
        if not seen.body or failed:
            return answer(chat(f"ANSWER: {seen.right_answer}") if seen.body else {"data": []})
        failed.append(True)
        return answer({"object": "error", "message": "Worker overloaded, try again", "code": 503})

    return reply


def test_a_resume_retries_json_that_is_no_completion_from_the_endpoint_that_answered(tmp_path: Path) -> None:
    """A resume of a run that holds this endpoint's replies, whose first answer is JSON with no choices (a gateway's
    {"object": "error", ...} in a 200, once): it stopped, exit 2, as a wrong --api-url, where an endpoint that
    answered once and fails later is a broken one, its requests retried."""
    failed: list[bool] = []
    reply = _error_object_once(failed)
    with AnswerServer(lambda s: answer(chat(f"ANSWER: {s.right_answer}")) if s.body else answer({})) as srv:
        assert timed_eval(srv.url, tmp_path, "--limit", "2")[0].returncode == 0
    with AnswerServer(reply) as srv:
        args = ("--use-cache", str(only_run_dir(tmp_path)), "--api-url", srv.url, "--limit", "3")
        result = run_cli("eval", *args, "--eval-batch-size", "1", "--retries", "1")
    assert result.returncode == 0 and failed, result.stderr
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")) == 3


def test_a_fresh_run_retries_an_error_object_in_a_200_at_its_first_answer(tmp_path: Path) -> None:
    """A gateway's {"object": "error", ...} in a 200 (vLLM's error shape) as a fresh run's first answer, once: the
    run stopped, exit 2, 'JSON that is no completion ... check --api-url', where --api-url was right (the body is
    the API's own error object) and the request, asked again, is answered."""
    failed: list[bool] = []
    reply = _error_object_once(failed)
    with AnswerServer(reply) as srv:
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "2", "--work-dir", str(tmp_path),
                         "--eval-batch-size", "1", "--retries", "1")  # fmt: skip
    assert result.returncode == 0 and failed, result.stderr
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")) == 2


@pytest.mark.parametrize(
    ("status", "title", "said"),
    [
        (405, "405 Not Allowed", "405 method not allowed: 405 Not Allowed (an HTML page)"),  # nginx serving files
        (501, "Error response", "501 not implemented: Error response (an HTML page)"),  # python -m http.server
    ],
)
def test_a_web_server_taking_no_post_is_a_wrong_endpoint(status: int, title: str, said: str, tmp_path: Path) -> None:
    """--api-url at a web server that serves only GET: each POST was retried as a failure, and the run
    ended 'broken' (exit 1, resume) after the retries, with an error row per sample sent."""
    page = f"<html><head><title>{title}</title></head><body></body></html>".encode()
    with AnswerServer(lambda s: answer(None, status, "Content-Type: text/html", raw=page)) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path)
        posts = sum(1 for s in srv.seen if s.body)
    assert result.returncode == 2 and elapsed < FAST
    assert one_line(result).endswith(f"/v1/chat/completions answered {said} - check --api-url")
    assert posts <= 3  # one request a sample, none retried


def test_a_redirect_elsewhere_is_refused_with_its_location(tmp_path: Path) -> None:
    where = "Location: https://new-home.example.invalid/v1/chat/completions"
    with AnswerServer(lambda s: answer({}, 301, where)) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path)
    assert result.returncode == 2 and elapsed < FAST
    line = one_line(result)
    assert "redirects (301) to https://new-home.example.invalid/v1/chat/completions" in line


def test_a_307_to_the_same_host_is_followed_with_the_same_post(tmp_path: Path) -> None:
    def respond(seen: Seen) -> bytes:
        if seen.path.startswith("/v1/"):
            return answer({}, 307, "Location: /v2/chat/completions")
        return answer(chat(seen.right_answer))

    with AnswerServer(respond) as srv:
        result, _ = timed_eval(srv.url, tmp_path)
        paths = [s.path for s in srv.seen]
        bodies = [s.body for s in srv.seen]
    assert result.returncode == 0, result.stderr
    assert sorted(paths) == ["/v1/chat/completions"] * 3 + ["/v2/chat/completions"] * 3
    assert all(body and body["messages"] for body in bodies)
    assert {r["error"] for r in read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")} == {None}


def test_a_redirect_loop_is_refused(tmp_path: Path) -> None:
    def respond(seen: Seen) -> bytes:
        other = "/v2/chat/completions" if seen.path.startswith("/v1/") else "/v1/chat/completions"
        return answer({}, 308, f"Location: {other}")

    with (
        AnswerServer(lambda s: answer({}, 308, "Location: http://127.0.0.1:99999/x")) as odd,
        AnswerServer(respond) as loop,
    ):
        bad_port, _ = timed_eval(odd.url, tmp_path / "a")
        looping, elapsed = timed_eval(loop.url, tmp_path / "b")
    assert bad_port.returncode == 2 and "redirects (308) to http://127.0.0.1:***/x" in one_line(bad_port)  # no port:
    # shown as a password with its @host forgotten would be
    assert looping.returncode == 2 and elapsed < FAST and "redirects (308)" in one_line(looping)


def test_a_key_revoked_mid_run_says_what_was_kept_and_how_to_resume(tmp_path: Path) -> None:
    """Three answers, then 401 to everything (the key revoked, a budget spent at the gateway): the run stopped
    (exit 2) with the server's line and 'check --api-key' alone, never naming the run directory that holds the
    three answers, nor that a resume with a good key asks only the rest."""

    def respond(seen: Seen) -> bytes:
        refused = {"error": {"message": "Incorrect API key provided"}}
        return answer(chat(f"ANSWER: {seen.right_answer}")) if seen.index < 3 else answer(refused, 401)

    with AnswerServer(respond) as srv:
        args = ("--limit", "10", "--eval-batch-size", "1", "--api-key", "sk-revoked-123456")
        result, _ = timed_eval(srv.url, tmp_path, *args)
        run = only_run_dir(tmp_path)
        kept = len(read_jsonl(run / "predictions/m/coin_flip.jsonl"))
        with FakeOpenAIServer("correct") as good:
            again = run_cli("eval", "--use-cache", str(run), "--api-key", "sk-good-123456", "--api-url", good.url)
            asked = sum(good.state.requests.values())
    assert result.returncode == 2 and kept == 3
    line = one_line(result)
    assert "answered 401 unauthorized: Incorrect API key provided" in line and "3 new samples kept" in line, line
    assert f"resume with: coinflip eval --use-cache {run}" in line and "123456" not in line
    assert again.returncode == 0 and asked == 7, again.stderr


@pytest.mark.parametrize("status", [413, 422, 400])
def test_validation_errors_are_not_retried_and_keep_the_servers_whole_message(status: int, tmp_path: Path) -> None:
    message = (
        "litellm.BadRequestError: OpenAIException - This model's maximum context length is 4096 tokens. "
        "However, you requested 99999 tokens (120 in the messages, 99879 in the completion). "
        "Please reduce the length of the messages or completion. " * 3
    ).strip()
    refusal = {"error": {"message": message, "type": "invalid_request_error"}}
    with AnswerServer(lambda s: answer(refusal, status)) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path, "--eval-batch-size", "1", "--retries", "5")
        sent = len(srv.seen)
    assert result.returncode == 2 and elapsed < FAST and sent == 1
    line = one_line(result)
    assert f"answered {status}" in line and message in line and line.rpartition(message)[2].startswith(" - ")


def test_a_server_failing_every_request_alike_stops_the_run_early_and_it_resumes(tmp_path: Path) -> None:
    """LiteLLM's proxy without its database client answers 500 to everything."""
    message = "litellm.InternalServerError: No connected db. (request 1234)"
    with AnswerServer(lambda s: answer({"error": {"message": message.replace("1234", str(s.index))}}, 500)) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path, "--limit", "200", "--eval-batch-size", "4", "--retries", "1")
        sent = len(srv.seen)
    assert result.returncode == 1 and elapsed < FAST and sent <= 16  # 200 samples would be 400 requests
    line = result.stderr.strip().splitlines()[-1]
    assert "the last 4 requests all failed the same way" in line and "HTTP 500: litellm.InternalServerError" in line
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert rows and all(r["error"].startswith("HTTP 500: litellm.InternalServerError: No connected db") for r in rows)
    with FakeOpenAIServer("correct") as good:
        again = run_cli("eval", "--model", "m", "--api-url", good.url, "--limit", "200", "--use-cache", str(run))
    assert again.returncode == 0, again.stderr
    assert len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 200


@pytest.mark.parametrize("request_id", ["req_{:024x}", "{:032x}", "{:08x}-7f3a-4c2b-9b8f-0e1d2c3b4a5f"])
def test_request_ids_of_letters_and_digits_do_not_hide_a_broken_endpoint(request_id: str, tmp_path: Path) -> None:
    """OpenAI's 500 names a request id of hex digits: digits aside, the messages still differed, and a
    broken endpoint was retried for every sample (200 x 6 requests) instead of stopping early."""
    said = "The server had an error while processing your request. (Please include the request ID {} in your message.)"

    def respond(seen: Seen) -> bytes:
        ident = request_id.format(0xABCDEF0123 * (seen.index + 1) + 0xFACE)  # letters in every one
        return answer({"error": {"message": said.format(ident), "type": "server_error"}}, 500)

    with AnswerServer(respond) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path, "--limit", "200", "--eval-batch-size", "4", "--retries", "1")
        sent = len(srv.seen)
    assert result.returncode == 1 and elapsed < FAST and sent <= 16  # 200 samples would be 400 requests
    line = result.stderr.strip().splitlines()[-1]
    assert "the last 4 requests all failed the same way" in line and "HTTP 500: The server had an error" in line


def test_mixed_failures_do_not_stop_the_run(tmp_path: Path) -> None:
    def respond(seen: Seen) -> bytes:
        if seen.index % 2:  # (a 503 or 429 is no failure: it slows the run down, see test_rate_limits.py)
            return answer({"error": {"message": "bad gateway"}}, 502)
        return answer({"error": {"message": "internal"}}, 500)

    with AnswerServer(respond) as srv:
        result, _ = timed_eval(srv.url, tmp_path, "--limit", "10", "--retries", "0")
    assert result.returncode == 1
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 10  # every sample was tried and recorded
    assert {r["error"] for r in rows} == {"HTTP 502: bad gateway", "HTTP 500: internal"}


def test_a_gateway_gets_its_header_and_query_parameter(tmp_path: Path) -> None:
    generation = {
        "extra_headers": {"api-key": "azure-key-0123456789"},
        "extra_query": {"deployment-tag": "blue"},
        "max_completion_tokens": 64,
        "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": False},
        "extra_body": {"top_k": 5},
    }
    with FakeOpenAIServer(
        "correct", require_headers={"api-key": "azure-key-0123456789"}, require_query={"api-version": "2024-02-01"},
        record=True,
    ) as srv:  # fmt: skip
        url = f"http://127.0.0.1:{srv.port}/openai/deployments/gpt?api-version=2024-02-01"
        result, _ = timed_eval(url, tmp_path, "--generation-config", json.dumps(generation))
        refused, _ = timed_eval(url, tmp_path / "b")  # no header: the gateway refuses
        seen = list(srv.state.seen)
    assert result.returncode == 0, result.stderr
    path, headers, body = seen[0]
    assert path == "/openai/deployments/gpt/chat/completions?api-version=2024-02-01&deployment-tag=blue"
    assert headers["api-key"] == "azure-key-0123456789"
    assert not {"extra_headers", "extra_query", "extra_body"} & set(body)
    assert body["max_completion_tokens"] == 64 and body["reasoning_effort"] == "low" and body["top_k"] == 5
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert refused.returncode == 2 and "header api-key missing" in one_line(refused)
    assert "azure-key-0123456789" not in result.stderr + refused.stderr


@pytest.mark.parametrize("password", ["s3cret/PW", "s3?cret", "s3#cret", "s3@cret", "s3cret"])
def test_a_password_in_the_api_url_is_never_shown_whatever_it_holds(password: str, tmp_path: Path) -> None:
    """One definition of a URL fit to print (errors.shown_url): all before the last `@` goes."""
    result, _ = timed_eval(f"http://user:{password}@api.example.invalid/v1", tmp_path)
    assert result.returncode == 2
    line = one_line(result)
    assert "api.example.invalid" in line and "s3" not in line and "user" not in line


def _resetting(at_once: bool) -> Any:
    """A port where something takes connections and resets each (an RST, no FIN), at once or once
    the request is in: a wrong port, a firewall, a server that is not HTTP."""

    def handle(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            if not at_once:
                conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    return handle


def _closing(conn: socket.socket) -> None:
    """Reads the request and hangs up without a word (a FIN)."""
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)


@pytest.mark.parametrize(
    ("handle", "how"),
    [(_resetting(True), "resets"), (_resetting(False), "resets"), (_closing, "closes")],
    ids=["reset-at-accept", "reset-after-request", "closed-after-request"],
)
@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_port_that_hangs_up_on_every_connection_fails_in_seconds(
    tmp_path: Path, handle: Any, how: str, batch: bool
) -> None:
    """Each sample went through its retries with a one-line error, and the run ended with exit 1,
    asking to resume a run that could not work: nothing there has ever answered HTTP."""
    with listening(handle) as port:
        extra = ("--batch", "--batch-poll-s", "0.05") if batch else ()
        result, elapsed = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path, "--limit", "40", *extra)
    assert result.returncode == 2 and elapsed < FAST, result.stderr
    assert one_line(result) == (
        f"error: http://127.0.0.1:{port} takes connections but {how} each one with no HTTP answer: is it an HTTP "
        "server? - check --api-url"
    )


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_server_that_takes_connections_and_never_answers_fails_in_seconds(tmp_path: Path, batch: bool) -> None:
    """A hung server, or a dead backend behind a port-forward: its silent GET was taken as a slow server's, and
    each request then waited --timeout (120 s) through its retries, minutes with nothing said."""
    with listening(_silent) as port:
        extra = ("--batch", "--batch-poll-s", "0.05") if batch else ()
        result, elapsed = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path, "--timeout", "1", "--limit", "4", *extra)
    assert result.returncode == 2 and elapsed < FAST, result.stderr
    assert one_line(result) == (
        f"error: http://127.0.0.1:{port} takes connections but answered no HTTP request, a GET included, in 2 s (a "
        "hung server, or a dead one behind a load balancer or port-forward?) - check --api-url"  # --timeout 1, twice
    )
    assert not list(tmp_path.iterdir())  # no run directory: nothing was asked


def test_a_hung_server_is_waited_for_at_most_the_start_up_bound_whatever_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait for a first GET followed --timeout, which reasoning runs set to 1,800 s: half an hour of silence
    before a hung endpoint was named. The bounds are shortened here; the rule is the same."""
    from coinflip import run_task
    from coinflip.errors import EndpointError
    from coinflip.models import _http

    monkeypatch.setattr(_http, "CONNECT_S", 1.0)
    monkeypatch.setattr(_http, "STARTUP_S", 1.0)
    with (
        listening(_silent) as port,
        pytest.raises(EndpointError, match=r"answered no HTTP request, a GET included, in 2 s"),
    ):
        config = {"model": "m", "api_url": f"http://127.0.0.1:{port}/v1", "timeout": 1800, "limit": 2}
        run_task({**config, "work_dir": str(tmp_path), "quiet": True})


def test_a_server_still_starting_up_is_waited_for_up_to_the_timeout(tmp_path: Path) -> None:
    """A scale-to-zero endpoint holds its first connections while it boots: a GET with no answer in 10 s (or
    --timeout), the capacity probes' too, was refused as a hung server, where a request would have been answered."""
    booted, lock, gets = threading.Event(), threading.Lock(), [0]

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader, contextlib.suppress(OSError):
            while (head := read_head(reader)) is not None:
                reader.read(content_length(head))
                if head.startswith(b"POST"):
                    conn.sendall(answer(chat("ANSWER: YES")))
                    continue
                with lock:
                    gets[0] += 1
                    booting = gets[0] <= 3  # the two probes and the first GET of the endpoint
                if booting:
                    booted.wait(PATIENCE_S)
                    return
                conn.sendall(answer({"error": "method not allowed"}, 405))

    try:
        with listening(handle) as port:
            result, _ = timed_eval(f"http://127.0.0.1:{port}/v1", tmp_path, "--timeout", "3")
    finally:
        booted.set()
    assert result.returncode == 0 and gets[0] == 4, (gets, result.stderr)
    assert len(read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")) == 3


def _not_http(conn: socket.socket) -> None:
    """What a port that speaks another protocol says first (here SSH's banner)."""
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
        conn.recv(1)  # until the client hangs up


def test_a_proxy_that_sends_something_other_than_http_fails_in_seconds(tmp_path: Path) -> None:
    with listening(_not_http) as port:
        env = {"HTTP_PROXY": f"http://user:hunter2pw@127.0.0.1:{port}"}  # the only way out: nothing leaves
        result, elapsed = timed_eval("http://api.example.invalid/v1", tmp_path, "--limit", "40", env=env)
    assert result.returncode == 2 and elapsed < FAST, result.stderr
    line = one_line(result)
    assert line.startswith(
        f"error: http://api.example.invalid:80 through proxy 127.0.0.1:{port} answers with something that is "
        "not HTTP (Bad status line"
    )
    assert "SSH-2.0" in line and line.endswith(" - check --api-url and HTTP_PROXY / HTTPS_PROXY / NO_PROXY")
    assert "hunter2pw" not in line


def test_a_server_that_answered_then_hangs_up_on_every_request_ends_incomplete_and_resumes(tmp_path: Path) -> None:
    """The pre-run test is for endpoints that never answered: a server that dies mid-run is a
    broken one (exit 1, early), and the run resumes once it is back."""
    answered = threading.Semaphore(5)  # the first five requests are answered; on the rest it hangs up

    def respond(seen: Seen) -> bytes | None:
        return answer(chat(seen.right_answer)) if answered.acquire(blocking=False) else None

    with AnswerServer(respond) as srv:
        result, elapsed = timed_eval(srv.url, tmp_path, "--limit", "40", "--eval-batch-size", "1", "--retries", "1")
    assert result.returncode == 1 and elapsed < FAST, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "the endpoint, not a sample, is broken" in line and "resume with: coinflip eval --use-cache" in line
    run = only_run_dir(tmp_path)
    rows = read_jsonl(run / "predictions/m/coin_flip.jsonl")
    assert sum(r["error"] is None for r in rows) == 5 and all(r["error"] for r in rows[5:])
    same = int(line.split("the last ")[1].split(" requests")[0])  # one at a time: each of them has its row
    assert len(rows) == 5 + same, (len(rows), line)  # the one that told was not left out
    with FakeOpenAIServer("correct") as good:
        again = run_cli("eval", "--model", "m", "--api-url", good.url, "--limit", "40", "--use-cache", str(run))
    assert again.returncode == 0, again.stderr
    assert len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 40


class _Gateway(QuietHandler):
    """Sends its own pages (here every GET's 404) in the coding of the class, whatever was asked;
    forwards the POSTs' replies as the model sent them."""

    coding = "br"
    gets = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).gets += 1
        self.send_response(404)
        self.send_header("Content-Encoding", self.coding)
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"\x8b\x05\x80{}\x03")

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(200, chat("ANSWER: YES"))


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_a_gateway_that_sends_its_own_pages_in_br_whatever_is_asked_is_an_http_server(
    tmp_path: Path, coding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pre-run test asks for a page (a GET) that such a gateway sends in br or zstd: that was
    an HTTP answer, told as 'not HTTP ... install Brotli' (exit 2); the run's replies decide."""
    monkeypatch.setattr(_Gateway, "coding", coding)
    monkeypatch.setattr(_Gateway, "gets", 0)
    with serving(_Gateway) as url:
        result, _ = timed_eval(url, tmp_path)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 3 and all(r["error"] is None for r in rows)
    assert _Gateway.gets == 3  # the capacity probes (/props, /v1/models), then the endpoint itself


def test_a_scheme_in_capitals_works_as_lowercase(tmp_path: Path) -> None:
    """RFC 3986 schemes are case-insensitive: `HTTP://127.0.0.1:PORT/v1` was refused as "not an http(s) URL"."""
    with FakeOpenAIServer("correct") as srv:
        url = "HTTP://" + srv.url.removeprefix("http://")
        result = run_cli("eval", "--model", "m", "--limit", "2", "--api-url", url, "--work-dir", str(tmp_path))
        asked = sum(srv.state.requests.values())
    assert result.returncode == 0 and asked == 2, result.stderr


def test_a_setting_s_note_is_told_once_whatever_stops_the_run(tmp_path: Path) -> None:
    """The note of a wider resume shared its name with the settings' notes: a dry run, or a run stopped before its
    directory, printed the last settings note again, without its prefix."""
    args = (
        "eval",
        "--model",
        "oracle",
        "--api-url",
        "http://127.0.0.1:1/v1",
        "--limit",
        "5",
        "--work-dir",
        str(tmp_path),
    )
    for extra, code in ((("--dry-run",), 0), (("--dataset-path", str(tmp_path / "none.jsonl")), 2)):
        result = run_cli(*args, *extra)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == code and sum("api_url: not used" in line for line in lines) == 1, result.stderr


def test_a_resume_whose_rows_landed_before_exit_2_keeps_its_wider_run_and_says_so(tmp_path: Path) -> None:
    """A key revoked after a reply landed (exit 2): the wider subset stays (a row is in it), so its note is told."""
    with FakeOpenAIServer("correct") as srv:
        first = run_cli("eval", "--model", "m", "--api-url", srv.url, "--limit", "3", "--work-dir", str(tmp_path))
    assert first.returncode == 0
    run = only_run_dir(tmp_path)

    def respond(seen: Seen) -> bytes:
        return answer(chat("ANSWER: YES")) if seen.index == 0 else answer({"error": {"message": "revoked"}}, 401)

    with AnswerServer(respond) as srv:
        result = run_cli(
            "eval", "--use-cache", str(run), "--limit", "6", "--eval-batch-size", "1", "--api-url", srv.url
        )
    assert result.returncode == 2 and "401" in result.stderr.splitlines()[-1], result.stderr
    assert "note: the run now covers 6 questions (it covered 3)" in result.stderr
    assert len(read_jsonl(run / "predictions/m/coin_flip.jsonl")) == 4
