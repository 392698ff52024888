"""What a hostile server echoes of a run's secrets, and what a user's slip puts in a message: neither
reaches a file, the terminal or an exception, in any form."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinflip import TaskConfig, run_task
from coinflip._terminal import one_line
from coinflip.errors import FatalAPIError
from coinflip.models._redact import CUT_LEAST, MIN_SECRET, Redactor, is_secret
from coinflip.secrets import auth_secrets, run_secrets
from coinflip.testing.server import FakeOpenAIServer

from .answer_server import AnswerServer, QuietHandler, Seen, answer, chat, serving
from .conftest import only_run_dir, read_jsonl, run_cli

KEY = "sk-live-SECRET-424242"


def test_a_key_cut_off_inside_a_long_message_is_masked_though_a_hint_follows(tmp_path: Path) -> None:
    """A 401 whose message is cut (…) inside the echoed key, then coinflip's hint: the key's start
    stood before the hint, where a cut key was masked only at the very end of a text."""

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": "x" * 1990 + seen.headers["authorization"].split()[-1]}}, 401)

    with AnswerServer(refuse) as srv, pytest.raises(FatalAPIError) as raised:
        run_task({"model": "m", "api_url": srv.url, "api_key": KEY, "limit": 1, "work_dir": str(tmp_path)})
    assert "x***… - check --api-key" in str(raised.value) and "sk-live" not in str(raised.value)


@pytest.mark.parametrize("where", ["logprob", "top"])
def test_a_key_echoed_in_the_log_probabilities_alone_reaches_no_file(tmp_path: Path, where: str) -> None:
    """The reply's text is clean; its log probabilities spell the key, as an alternative token or as a
    logprob sent as text (kept as the text it is): they were saved as sent, as only the texts were looked at."""

    def reply(seen: Seen) -> bytes:
        key, answer_token = seen.headers["authorization"].split()[-1], f" {seen.right_answer}"
        last = (answer_token, key, answer_token) if where == "logprob" else (answer_token, -0.1, key)
        tokens = [("ANSWER", -0.1, "ANSWER"), (":", -0.1, ":"), last]
        entries = [
            {"token": t, "logprob": lp, "top_logprobs": [{"token": alt, "logprob": -1.0}]} for t, lp, alt in tokens
        ]
        payload = chat(f"ANSWER: {seen.right_answer}")
        payload["choices"][0]["logprobs"] = {"content": entries}
        return answer(payload)

    with AnswerServer(reply) as srv:
        args = ("--api-key", KEY, "--limit", "3", "--generation-config", "logprobs=true,top_logprobs=1")
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args, "--work-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert len(rows) == 3 and all(r["reply"].startswith("ANSWER: ") for r in rows)
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert b"SECRET" not in path.read_bytes(), path


def test_a_key_given_with_spaces_around_it_is_masked_where_the_server_echoes_it_without(tmp_path: Path) -> None:
    """`--api-key " KEY "` (copied with its spaces): the server reads the header without them and
    echoes the bare key, which the spaced secret did not match."""

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": f"upstream refused {seen.headers['authorization'].split()[-1]}."}}, 500)

    with AnswerServer(refuse) as srv:
        args = ("--api-key", f" {KEY}\t", "--limit", "2", "--retries", "0", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args)
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert [r["error"] for r in rows] == ["HTTP 500: upstream refused ***."] * 2
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert b"SECRET" not in path.read_bytes(), path


@pytest.mark.parametrize("turn", [str.upper, str.lower], ids=["upper", "lower"])
def test_a_key_the_server_echoes_turned_reaches_no_file_and_no_terminal(tmp_path: Path, turn: Any) -> None:
    """An echo of the key upper- or lower-cased was saved and shown as it came."""

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": f"key {turn(seen.headers['authorization'].split()[-1])} refused"}}, 500)

    with AnswerServer(refuse) as srv:
        args = ("--api-key", KEY, "--limit", "2", "--retries", "0", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args)
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert [r["error"] for r in rows] == ["HTTP 500: key *** refused"] * 2
    shown = (result.stdout + result.stderr).encode()
    for text in [shown, *(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())]:
        assert turn(KEY).encode() not in text and KEY.encode() not in text


@pytest.mark.parametrize("how", ["extra_headers", "api_key"])
def test_a_bearer_token_is_masked_where_the_server_echoes_the_token_alone(tmp_path: Path, how: str) -> None:
    """A gateway's `Authorization: Bearer TOKEN` in extra_headers (or a key given as `Bearer TOKEN`):
    the secret was the header's whole text, and a server that echoes the token it read did not match it."""

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": f"invalid token {seen.headers['authorization'].split()[-1]}"}}, 500)

    given = {"extra_headers": ["--generation-config", f'{{"extra_headers": {{"Authorization": "Bearer {KEY}"}}}}'],
             "api_key": ["--api-key", f"Bearer {KEY}"]}[how]  # fmt: skip
    with AnswerServer(refuse) as srv:
        args = ("--limit", "2", "--retries", "0", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *given, *args)
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert [r["error"] for r in rows] == ["HTTP 500: invalid token ***"] * 2
    for text in [result.stderr, *(p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file())]:
        assert "SECRET" not in text


@pytest.mark.parametrize(
    "generation",
    [
        f"extra_headers={{api-key: {KEY}}}",  # not JSON: read as a text
        f"extra_headers=Authorization: Bearer {KEY}",
        f"extra_query=key={KEY}",
        f'{{"extra_body": ["token", "{KEY}"]}}',
        f'{{"extra_headers": {{"api-key: {KEY}": ""}}}}',  # the whole header as its name
        f'{{"extra_headers": {{"Authorization: Bearer {KEY}": null}}}}',
        'extra_headers={1: "x"}',  # a Python literal's name that is no text: an AttributeError traceback
    ],
)
def test_a_refused_gateway_setting_is_told_without_its_secret(tmp_path: Path, generation: str) -> None:
    """A gateway setting given in the wrong shape was printed whole in its refusal."""
    result = run_cli("eval", "--model", "m", "--api-url", "http://127.0.0.1:9/v1", "--generation-config", generation,
                     "--work-dir", str(tmp_path))  # fmt: skip
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "SECRET" not in result.stderr + result.stdout and "generation_config" in result.stderr


def test_evalscopes_judge_and_model_args_keep_their_keys_out_of_the_saved_settings(tmp_path: Path) -> None:
    """EvalScope's judge_model_args (and model_args, judge) may hold an api_key and a URL with a password;
    coinflip takes them (unused) and wrote them into task_config.yaml as given."""
    config = tmp_path / "task.yaml"
    with FakeOpenAIServer("correct") as srv:
        judge = {"api_key": KEY, "api_url": f"http://u:{KEY}@judge.example/v1", "model_id": "j"}
        settings = {"model": "m", "api_url": srv.url, "limit": 2, "work_dir": str(tmp_path / "w"),
                    "judge_model_args": judge, "model_args": {"api_key": KEY}, "judge": {"key": [KEY]}}  # fmt: skip
        config.write_text(json.dumps(settings))
        config = config.rename(config.with_suffix(".json"))
        result = run_cli("eval", "--config", str(config))
        assert result.returncode == 0, result.stderr
        run = only_run_dir(tmp_path / "w")
        resumed = run_cli("eval", "--config", str(config), "--use-cache", str(run))
        assert resumed.returncode == 0, resumed.stderr
    for text in [result.stderr, resumed.stderr, *(p.read_text() for p in (tmp_path / "w").rglob("*") if p.is_file())]:
        assert "SECRET" not in text
    assert "judge_model_args" in (run / "configs/task_config.yaml").read_text()


def test_a_proxy_user_name_holding_a_colon_is_one_line(tmp_path: Path) -> None:
    """`HTTPS_PROXY=http://us%3Aer:PASSWORD@host`: a ':' in the user name makes no Basic credential;
    aiohttp's ValueError came out of the first request as a traceback (exit 1)."""
    proxy = f"http://us%3Aer:{KEY}@127.0.0.1:9"
    args = ("--model", "m", "--api-url", "https://api.example.com/v1", "--work-dir", str(tmp_path))
    result = run_cli("eval", *args, env={"HTTPS_PROXY": proxy})
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "proxy 'http://127.0.0.1:9'" in result.stderr and "SECRET" not in result.stderr
    assert not any(tmp_path.iterdir())  # no run directory left behind


def test_a_task_configs_repr_shows_no_secret() -> None:
    """The key was left out of TaskConfig's repr, but the gateway's texts, the URL's query and EvalScope's
    judge key were shown as given (a notebook's output, a traceback's locals, a user's log)."""
    config = TaskConfig(model="m", api_url=f"http://127.0.0.1:9/v1?code={KEY}", api_key=KEY,
                        generation_config={"extra_headers": {"api-key": KEY}, "extra_query": {"sig": KEY}},
                        judge_model_args={"api_key": KEY})  # fmt: skip
    assert "SECRET" not in repr(config) and "SECRET" not in str([config])
    assert "api_url='http://127.0.0.1:9/v1?code=***'" in repr(config) and repr(config).startswith(
        "TaskConfig(model='m'"
    )


@pytest.mark.parametrize(
    "url", [{"u": f"http://127.0.0.1:9/v1?key={KEY}"}, [{"u": f"http://127.0.0.1:9/v1?key={KEY}"}]]
)
def test_an_api_url_that_is_no_text_is_refused_without_its_query(tmp_path: Path, url: object) -> None:
    """An api_url given as an object (a config file's slip) was printed whole in its refusal, the
    query's key with it, where a URL given as text shows its query values masked."""
    config = tmp_path / "task.json"
    config.write_text(json.dumps({"model": "m", "api_url": url, "work_dir": str(tmp_path / "w")}))
    result = run_cli("eval", "--config", str(config))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "SECRET" not in result.stderr and "api_url" in result.stderr


@pytest.mark.parametrize(("given", "after"), [(["--api-key", KEY], ""), ([f"--api-key={KEY}"], " (after --api-key)")])
def test_an_argument_not_utf8_after_the_key_does_not_name_the_key(tmp_path: Path, given: list[str], after: str) -> None:
    """The refusal of an argument in bytes that are not UTF-8 named the argument before it: the key, when
    it came right after it (or `--api-key=KEY`)."""
    args = [sys.executable, "-m", "coinflip.cli", "eval", "--model", "m", *given, b"--work-dir=caf\xe9"]
    result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2 and "SECRET" not in result.stderr, result.stderr
    assert f"argument {4 + len(given)}{after} holds bytes that are not UTF-8" in result.stderr


def test_the_batch_api_follows_no_redirect_to_another_host(tmp_path: Path) -> None:
    """A Batch API that answers 307 to another host: aiohttp followed it, and drops only Authorization
    there, so a gateway's api-key header and the upload went to that host. Online, such a redirect is
    refused with its Location shown; the Batch API now refuses it too."""
    stolen: list[dict[str, str]] = []

    class Thief(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            stolen.append(dict(self.headers))
            self.reply(400, {"error": {"message": "no"}})

        do_GET = do_POST  # noqa: N815

    with serving(Thief) as thief:

        class Redirect(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.send_response(307)
                self.send_header("Location", thief.removesuffix("/v1") + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST  # noqa: N815

        with serving(Redirect) as url:
            generation = json.dumps({"extra_headers": {"api-key": "hdr-SECRET-5555"}})
            args = ("--limit", "2", "--batch", "--generation-config", generation, "--work-dir", str(tmp_path))
            result = run_cli("eval", "--model", "m", "--api-url", url, "--api-key", KEY, *args)
    assert not stolen and result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "answered 307 to http://127.0.0.1:" in result.stderr


def test_a_redirect_to_the_same_server_with_credentials_in_its_location_is_refused(tmp_path: Path) -> None:
    """A 307 to the same host and port whose Location carries `user:password@`: followed with the key's
    Authorization, aiohttp refused the pair with a ValueError, which came out as a traceback (exit 1)."""

    def send(seen: Seen) -> bytes:
        return answer(None, 307, f"Location: http://u:pw@127.0.0.1:{srv.port}/v1/chat/completions", raw=b"")

    with AnswerServer(send) as srv:
        args = ("--api-key", KEY, "--limit", "2", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "redirects (307) to" in result.stderr and "pw" not in result.stderr and "SECRET" not in result.stderr


def test_a_long_bearer_token_is_masked_whole_and_cut_not_a_recursion_error(tmp_path: Path) -> None:
    """A gateway's JWT of 1,500 characters (Azure AD's are about that long): the redactor's pattern for a
    secret cut off nested one group per character, and from about 500 characters re's parser ran out of
    recursion, so every run with such a key or header ended in a RecursionError traceback."""
    token = "eyJ" + "".join(f"{n:x}SECRET" for n in range(150))[:1497]

    def echo(seen: Seen) -> bytes:
        sent = seen.headers["authorization"].split()[-1]
        if seen.index % 2:
            return answer({"error": {"message": f"bad token {sent[:700]}…"}}, 500)
        return answer(chat(f"ANSWER: {seen.right_answer} (token {sent})"))

    generation = json.dumps({"extra_headers": {"Authorization": f"Bearer {token}"}})
    with AnswerServer(echo) as srv:
        args = ("--generation-config", generation, "--limit", "2", "--retries", "0", "--eval-batch-size", "1")
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args, "--work-dir", str(tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert sorted(r["reply"] or r["error"] for r in rows)[0].endswith("(token ***)")
    assert "HTTP 500: bad token ***…" in [r["error"] for r in rows]
    for text in [result.stderr, *(p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file())]:
        assert "SECRET" not in text


@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=MIN_SECRET, max_size=300).filter(is_secret),
       st.integers(0, 300), st.sampled_from(["", "… - hint", "…"]))  # fmt: skip
def test_a_secret_cut_anywhere_past_its_start_is_masked(secret: str, at: int, after: str) -> None:
    """The cut form, now nested per chunk: every start of CUT_LEAST or more characters, at a text's end or
    before a cut's …, is masked as the per-character nesting masked it."""
    cut = secret[: max(CUT_LEAST, at % len(secret))]
    assert Redactor([secret])(f"[{cut}{after}") == f"[***{after}"


def test_only_a_one_word_token_after_a_scheme_is_a_secret_of_its_own() -> None:
    """A gateway text that is a sentence stays one secret: its words after the first are no token, which
    would mask them in every reply."""
    generation = {"extra_body": {"note": "Final ANSWER: YES"}, "extra_headers": {"Authorization": f"Token {KEY}"}}
    redact = Redactor(run_secrets(None, generation, None))
    assert redact("ANSWER: YES") == "ANSWER: YES" and redact(f"got {KEY}") == "got ***"
    assert auth_secrets("Answer carefully please") == [] and auth_secrets(f"Bearer {KEY}") == [KEY]


def test_a_secret_of_several_lines_is_masked_in_a_one_line_message(tmp_path: Path) -> None:
    """A gateway text of several lines (a PEM key in extra_body) echoed in an error: the message is made one
    line, its breaks shown as U+FFFD, which no form of a line break in the secret matched."""
    pem = "-----BEGIN KEY-----\nMIIEvSECRETa1b2c3\nd4e5SECRETf6-----END KEY-----"

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": f"cannot use {seen.body['client_key']} here"}}, 500)

    generation = json.dumps({"extra_body": {"client_key": pem}})
    with AnswerServer(refuse) as srv:
        args = ("--generation-config", generation, "--limit", "2", "--retries", "0", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, *args)
    assert result.returncode == 1, result.stderr
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert [r["error"] for r in rows] == ["HTTP 500: cannot use *** here"] * 2
    for text in [result.stderr, *(p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file())]:
        assert "SECRET" not in text


def test_a_key_echoed_in_base64_reaches_no_file_nor_the_terminal(tmp_path: Path) -> None:
    """A server that echoes the Authorization header, or the key alone, base64-encoded (standard or URL-safe)
    in its error and in its answer: the encoded key was saved and printed as sent."""

    def reply(seen: Seen) -> bytes:
        header = seen.headers["authorization"].encode()
        said = f"{base64.b64encode(header).decode()} {base64.urlsafe_b64encode(header[7:]).decode()}"
        if seen.index % 2:
            return answer({"error": {"message": f"denied {said}"}}, 500)
        return answer(chat(f"you sent {said}\nANSWER: {seen.right_answer}"))

    with AnswerServer(reply) as srv:
        args = ("--api-key", KEY, "--limit", "3", "--retries", "0", "--work-dir", str(tmp_path))
        result = run_cli("eval", "--model", "m", "--api-url", srv.url, "--eval-batch-size", "1", *args)
    assert result.returncode == 1, result.stderr
    encoded = [base64.b64encode(s.encode()).decode()[4:-4] for s in (KEY, f"Bearer {KEY}")]
    rows = read_jsonl(only_run_dir(tmp_path) / "predictions/m/coin_flip.jsonl")
    assert any(r["error"] for r in rows) and any(r["reply"] for r in rows)
    for text in [result.stdout + result.stderr, *(p.read_text() for p in tmp_path.rglob("*") if p.is_file())]:
        assert not any(e in text for e in encoded), text


def test_a_base64_key_cut_off_where_a_message_ends_is_masked() -> None:
    """A long message cut (…) inside the base64 of the Authorization header: the encoded key's start stood
    before the cut, where only its whole form was masked."""
    encoded = base64.b64encode(f"Bearer {KEY}".encode()).decode()
    redact = Redactor([KEY])
    for end in range(24, len(encoded)):
        for tail in ("…", ""):
            assert encoded[16:24] not in redact(f"denied {encoded[:end]}{tail}"), end


def test_a_long_key_echoed_in_base64_wrapped_at_76_characters_is_masked() -> None:
    """A 2,000-character token (a gateway's JWT) echoed as `base64` and MIME write it, a line break every 76
    characters: only unbroken base64 was masked, and each line of the wrapped one was saved and shown as sent."""
    token = "eyJ" + "aB3-_x.Q9z" * 200
    for echoed in (f"Bearer {token}", token):
        wrapped = base64.encodebytes(echoed.encode()).decode()
        for shown in (wrapped, crlf := wrapped.replace("\n", "\r\n"), one_line(wrapped), one_line(crlf)):
            masked = Redactor([token])(f"you sent {shown} back")
            assert not [line for line in wrapped.splitlines()[1:-1] if line in masked], masked[:200]


def test_evalscopes_unused_settings_given_as_text_keep_their_keys_out_of_the_saved_settings(tmp_path: Path) -> None:
    """EvalScope's own CLI takes --judge-model-args as JSON text, and a YAML file may give `judge` a bare key or
    `model_args` a list: only a dict was masked, so these were saved in task_config.yaml as given."""
    config = tmp_path / "task.yaml"
    config.write_text(f"judge: {KEY}\nmodel_args: [{{token: {KEY}}}]\n")
    result = run_cli("eval", "--model", "oracle", "--limit", "2", "--work-dir", str(tmp_path / "w"), "--config",
                     str(config), "--judge-model-args", json.dumps({"api_key": KEY}))  # fmt: skip
    assert result.returncode == 0, result.stderr
    saved = (only_run_dir(tmp_path / "w") / "configs/task_config.yaml").read_text()
    assert "SECRET" not in saved and "judge_model_args" in saved and "model_args" in saved


@pytest.mark.parametrize("where", ["api_url", "proxy"])
@pytest.mark.parametrize("password", [KEY.replace("-", ""), "20240917123", "0123456789"])  # no port
def test_a_password_left_without_its_host_is_not_shown(tmp_path: Path, where: str, password: str) -> None:
    """`http://user:PASSWORD` with `@host` forgotten reads as host `user` and port PASSWORD: the refusal
    quoted the URL, and Python's own reason, with the password in it."""
    url = f"http://user:{password}"
    api_url, env = (url, {}) if where == "api_url" else ("http://api.example.com/v1", {"HTTP_PROXY": url})
    result = run_cli("eval", "--model", "m", "--api-url", api_url, "--work-dir", str(tmp_path), env=env)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert password not in result.stderr + result.stdout and where in result.stderr


@pytest.mark.parametrize("slip", [f"temperature=0,Authorization: Bearer {KEY}", f"{KEY}", f"stop=x,{KEY} "])
def test_a_secret_pasted_as_a_generation_config_item_is_never_echoed(tmp_path: Path, slip: str) -> None:
    """An item without '=' was quoted whole in the error: a key pasted there reached the terminal."""
    result = run_cli("eval", "--model", "oracle", "--generation-config", slip, "--work-dir", str(tmp_path))
    assert result.returncode == 2 and "is not key=value" in result.stderr, result.stderr
    assert "SECRET" not in result.stdout + result.stderr
    with pytest.raises(ValueError, match="is not key=value") as raised:
        TaskConfig(model="oracle", generation_config=slip)
    assert "SECRET" not in str(raised.value)


@pytest.mark.parametrize("text", [f"model: m\napi_key: {KEY}\n", KEY, f"{{'api_key': '{KEY}'}}"])
def test_settings_given_to_run_task_as_text_are_never_echoed(text: str) -> None:
    """YAML text passed where a file's path goes was quoted whole, key and all, in the error."""
    with pytest.raises(ValueError, match="no path of a .yaml") as raised:
        run_task(text)
    assert "SECRET" not in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("given", [[KEY], {"key": KEY}, 4242424242424242])
def test_an_api_key_of_the_wrong_type_is_never_echoed(tmp_path: Path, given: object) -> None:
    """`api_key: [sk-...]` in a YAML file said "must be a text, got list ['sk-...']"."""
    config = tmp_path / "task.yaml"
    config.write_text(json.dumps({"model": "oracle", "api_key": given}))
    result = run_cli("eval", "--config", str(config), "--dry-run")
    assert result.returncode == 2 and "api_key must be a text" in result.stderr, result.stderr
    assert "SECRET" not in result.stderr and "4242" not in result.stderr


@pytest.mark.parametrize("slip", [f"temperature=0 {KEY}", f"max_tokens=9;{KEY}", f"top_p=1\t{KEY}"])
def test_a_key_typed_into_a_number_s_value_is_never_echoed(slip: str) -> None:
    """A space or a semicolon for a comma made the key part of a number's value, quoted in 'must be a number'."""
    result = run_cli("eval", "--model", "oracle", "--generation-config", slip, "--dry-run")
    assert result.returncode == 2 and "must be" in result.stderr and "not shown" in result.stderr, result.stderr
    assert "SECRET" not in result.stderr
