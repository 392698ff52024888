"""Ideas that lived in two places now have one definition, and their callers agree on the cases
where the copies used to differ."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from coinflip.scoring.cost import Budget, cost_report, tokens
from coinflip.scoring.scorer import Scorer

from .answer_server import Seen
from .conftest import run_cli

PRICES = {"price_input": 2.0, "price_output": 8.0}


def _row(i: int, usage: dict[str, Any], forced_usage: dict[str, Any] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"id": i, "repeat": 0, "target": "YES", "people": 2, "question": f"q{i}"}
    row |= {"reply": "ANSWER: YES" if forced_usage is None else "no answer", "error": None, "usage": usage}
    if forced_usage is not None:
        row["forced"] = {"reply": "ANSWER: YES", "error": None, "usage": forced_usage}
    return row


def test_the_report_and_the_max_cost_budget_read_saved_token_counts_alike() -> None:
    """A hand-edited count (a float, a number past any request, a string) is no count for either:
    the --max-cost budget priced such counts where the report's cost left them out."""
    rows = [
        _row(0, {"prompt_tokens": 100, "completion_tokens": 50}),
        _row(1, {"prompt_tokens": 4000.0, "completion_tokens": 10**18}),
        _row(
            2,
            {"prompt_tokens": "70", "completion_tokens": 20},
            forced_usage={"prompt_tokens": 30, "completion_tokens": 2.5},
        ),
    ]
    scorer = Scorer()
    for row in rows:
        scorer.add(row)  # type: ignore[arg-type]
    report_cost = cost_report(PRICES, tokens(scorer.usage, scorer.forced_usage))
    assert report_cost is not None
    budget = Budget(1.0, {"input": 2.0, "output": 8.0, "batch_discount": 0.5}, False, {})
    budget.add_saved(rows)
    counted = (100 + 30) * 2.0 + (50 + 20) * 8.0  # the whole counts only
    assert report_cost["total"] == pytest.approx(counted / 1e6)
    assert budget.saved == pytest.approx(report_cost["total"])


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/v1?code=SECRETKEY123",  # port out of range
        "ftp://host/v1?sig=SECRETKEY123",  # not http(s)
        "http://host/v1?api-version=2024-01-01&sig=SECRET KEY123",  # a space: refused
        "http://user:pw@host/v1?code=SECRETKEY123",  # credentials
        "http://u%40ser:p%3Aw@[::1]:8000/v1?code=SECRETKEY123",  # encoded userinfo, an IPv6 host and a port
        "http://user:pw@host/v1?code=SECRET@KEY123",  # an `@` in the query too: only the userinfo's goes
        "http://user:pw@host:80/v1?api-version=2024-01-01&SECRETKEY123",  # a bare query item is a secret whole
        "https://user:pw?x@host/v1?code=SECRET@KEY123",  # a raw `?` in the password, an `@` in the query
    ],
)
def test_a_refused_api_url_is_shown_as_the_saved_config_masks_it(tmp_path: Path, url: str) -> None:
    """The one-line refusal of --api-url masks query values as the saved config does (redacted_url),
    and drops credentials: it printed a function key in `code` or a SAS signature in `sig` as given."""
    result = run_cli("eval", "--model", "m", "--api-url", url, "--limit", "1", "--work-dir", str(tmp_path))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "SECRET" not in result.stderr and "pw" not in result.stderr, result.stderr
    assert "***" in result.stderr and ("api-version=2024-01-01" in result.stderr or "api-version" not in url)


def test_the_model_names_the_help_lists_are_the_ones_the_code_knows() -> None:
    """--model's help, the baselines and the local models read one list each (config.py)."""
    from coinflip.config import BASELINES, LOCAL_MODELS, settings
    from coinflip.models.baselines import Baseline
    from coinflip.models.llama_local import GGUF_PACKAGES

    (model,) = [s for s in settings() if s.name == "model"]
    assert all(name in model.help for name in (*BASELINES, *LOCAL_MODELS)), model.help
    assert set(GGUF_PACKAGES) == set(LOCAL_MODELS)
    for name in BASELINES:
        assert Baseline(name).name == name


KEY = "sk-right-key-0123456789"


@pytest.mark.parametrize(
    "query",
    [
        "?code=AB@SECRETKEY99",  # an `@` in a query value: no credential, and not where the host starts
        "?api-version=2024-01-01&user=me@SECRETHOST.example",
        "?SECRETTOKEN123",  # a bare item: a gateway's token, no `=`
        "?api-version=2024-01-01&sig=SECRET%2FKEY%3D",  # percent-encoded
    ],
)
def test_an_api_url_is_shown_in_one_form_in_messages_and_in_the_saved_config(tmp_path: Path, query: str) -> None:
    """A message named `http://SECRETKEY99` as the endpoint (all before the URL's last `@` was
    taken for credentials, so the tail of a query value stood in for the host), and a bare query
    item (`?TOKEN`) was saved as given. Now the 401's message and the saved config show the URL in
    one form (config.shown_url): the real host, every query value masked."""
    from coinflip.testing.server import FakeOpenAIServer

    with FakeOpenAIServer("correct", api_key=KEY) as srv:
        url = srv.url + query
        args = ("eval", "--model", "m", "--limit", "2", "--no-timestamp", "--api-url", url)
        ran = run_cli(*args, "--work-dir", str(tmp_path / "ok"), env={"OPENAI_API_KEY": KEY})
        refused = run_cli(*args, "--work-dir", str(tmp_path / "no"), "--api-key", "sk-wrong-key-0123456789")
    assert ran.returncode == 0, ran.stderr
    saved = yaml.safe_load((tmp_path / "ok/configs/task_config.yaml").read_text())["config"]["api_url"]
    head, _, masked = saved.partition("?")
    assert head == srv.url and masked and "SECRET" not in masked and "***" in masked, saved
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert f"{head}/chat/completions?{masked} answered 401" in refused.stderr, refused.stderr
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or b"SECRET" not in path.read_bytes(), path
    assert "SECRET" not in ran.stdout + ran.stderr + refused.stdout + refused.stderr


@pytest.mark.parametrize(
    ("extra_body", "refused"),
    [
        ({"bearer": "tok-body-secret-5678"}, True),  # a name no pattern of secret names knew
        ({"x_pass": ["tok-body-secret-5678"]}, True),  # nested
        ({"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}, "guided_choice": ["YES", "NO"]}, False),
    ],
)
def test_a_request_file_carries_no_text_the_saved_config_would_mask(
    tmp_path: Path, extra_body: dict[str, Any], refused: bool
) -> None:
    """--batch-write refused extra_body keys by a pattern of secret-looking names, while the saved
    config masks every text but those under config.PLAIN_KEYS: `bearer` was masked in the run
    directory and written as given into the request file. One rule now decides both."""

    requests = tmp_path / "r.jsonl"
    done = run_cli(
        "eval", "--model", "m", "--limit", "3", "--generation-config", json.dumps({"extra_body": extra_body}),
        "--batch-write", str(requests), "--work-dir", str(tmp_path / "w"),
    )  # fmt: skip
    if refused:
        assert done.returncode == 2 and "look like secrets" in done.stderr and not requests.exists(), done.stderr
        assert "tok-body-secret" not in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert all(json.loads(line)["body"]["top_k"] == 5 for line in requests.read_text().splitlines())


def test_a_baseline_with_an_api_url_says_the_url_is_not_used(tmp_path: Path) -> None:
    """Who answers a run is decided once (models.backend): a baseline answers in-process even with
    --api-url, which was silently ignored (a local model's name with --api-url goes to that server);
    now a note says so, and no request is sent."""
    from coinflip.testing.server import FakeOpenAIServer

    with FakeOpenAIServer("correct") as srv:
        done = run_cli(
            "eval", "--model", "always-no", "--api-url", srv.url, "--limit", "2", "--work-dir", str(tmp_path)
        )  # fmt: skip
        asked = sum(srv.state.requests.values())
    assert done.returncode == 0, done.stderr
    assert "note: api_url: not used, --model always-no is a baseline" in done.stderr and asked == 0


SECRETS = {
    "api_key": "sk-key/Secret+42&x",
    "code": "code-Secret@4242",
    "bare": "bareSecretToken77",
    "header": "hdr-Secret%41-99",
    "query": "qry Secret=55",
    "body": 'body-Secret"66',
}


def _echo(seen: Seen) -> bytes:
    """Every request as the server got it (its path with the query, headers, body), sent back as
    the reply for even questions and as an error for odd ones."""
    from .answer_server import answer, chat

    said = json.dumps({"path": seen.path, "headers": seen.headers, "body": seen.body})
    if seen.index % 2:
        return answer({"error": {"message": f"refused: {said}"}}, 500)
    return answer(chat(f"ANSWER: YES\nyou sent {said}"))


def test_every_secret_a_run_holds_is_masked_in_every_file_and_line_whatever_the_server_echoes(tmp_path: Path) -> None:
    """The key, the URL's query values and bare items, and the gateway's header, query and body
    texts are one set of secrets (config.run_secrets), masked by one redactor wherever a server
    echoes them and by one rule in the saved config; none of them, in any form the request
    carried it (raw, JSON-escaped, percent-encoded), reaches a file or the terminal."""
    import html
    from urllib.parse import quote, quote_plus

    from .answer_server import AnswerServer

    generation = {
        "extra_headers": {"X-Gateway-Pass": SECRETS["header"]},
        "extra_query": {"token": SECRETS["query"], "api-version": "2024-01-01"},
        "extra_body": {"user_pass": SECRETS["body"]},
    }
    with AnswerServer(_echo) as srv:
        url = f"{srv.url}?code={quote(SECRETS['code'], safe='')}&{SECRETS['bare']}"
        done = run_cli(
            "eval", "--model", "m", "--api-url", url, "--api-key", SECRETS["api_key"], "--limit", "6",
            "--retries", "0", "--eval-batch-size", "1", "--generation-config", json.dumps(generation),
            "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert len(srv.seen) >= 6 and all(SECRETS["bare"] in s.path for s in srv.seen)  # the server got them all
    assert done.returncode == 1, done.stderr  # the odd questions errored
    texts = [done.stdout + done.stderr] + [p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    for secret in SECRETS.values():
        forms = {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret), html.escape(secret)}
        for text in texts:
            assert not any(form in text for form in forms), (secret, text[:2000])
    saved = yaml.safe_load(next(tmp_path.rglob("task_config.yaml")).read_text())["config"]
    assert "2024-01-01" in saved["generation_config"]["extra_query"]["api-version"]


def test_a_secret_split_across_lines_or_cut_off_is_masked(tmp_path: Path) -> None:
    """A server that wraps what it echoes (an error page at 76 columns, a folded header) splits
    the key across lines, and a long message is cut to MAX_MESSAGE characters, maybe inside the
    key: each half, and the cut-off start, was kept as it came, in the predictions, the log and on
    the terminal (a message is made one line, and cut, before it is masked)."""
    from coinflip.models._replies import MAX_MESSAGE

    from .answer_server import AnswerServer, answer, chat

    key = "sk-split-0123456789abcdefXYZ"
    halves = (key[:14], key[14:])
    filler = "x" * (MAX_MESSAGE - len("HTTP 500: ") - 20)

    def wrapped(seen: Seen) -> bytes:
        if seen.index % 3 == 1:
            return answer({"error": {"message": f"bad key {halves[0]}\n    {halves[1]} refused"}}, 500)
        if seen.index % 3 == 2:
            return answer({"error": {"message": f"{filler} {key} and more"}}, 500)
        return answer(chat(f"ANSWER: YES\nyou sent {halves[0]}\r\n{halves[1]}"))

    with AnswerServer(wrapped) as srv:
        done = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--api-key", key, "--limit", "6", "--retries", "0",
            "--eval-batch-size", "1", "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    texts = [done.stdout + done.stderr] + [p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert any("you sent ***" in text for text in texts) and any("bad key *** refused" in text for text in texts)
    for text in texts:
        assert halves[0] not in text and halves[1] not in text and key[:8] not in text, text[:3000]


def test_a_basic_credential_is_masked_in_the_form_a_server_decodes_it_to(tmp_path: Path) -> None:
    """A gateway's `Authorization: Basic TOKEN` header (extra_headers) was masked as the token only;
    a server that says whom it decoded (`user:password`, or the password) printed them as they came.
    A proxy's credentials were already decoded so; one function (secrets.auth_secrets) does both."""
    import base64

    from .answer_server import AnswerServer, answer, chat

    password = "gw-Password-7788"
    token = base64.b64encode(f"gw-user:{password}".encode()).decode()

    def decoding(seen: Seen) -> bytes:
        got = next(v for k, v in seen.headers.items() if k.lower() == "x-gateway-auth")
        pair = base64.b64decode(got.partition(" ")[2]).decode()
        if seen.index % 2:
            return answer({"error": {"message": f"user {pair} may not"}}, 500)
        return answer(chat(f"ANSWER: YES\nhello {pair.partition(':')[0]}, your password is {pair.partition(':')[2]}"))

    generation = json.dumps({"extra_headers": {"X-Gateway-Auth": f"Basic {token}"}})
    with AnswerServer(decoding) as srv:
        done = run_cli(
            "eval", "--model", "m", "--api-url", srv.url, "--generation-config", generation, "--limit", "4",
            "--retries", "0", "--eval-batch-size", "1", "--work-dir", str(tmp_path),
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    texts = [done.stdout + done.stderr] + [p.read_text("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert any("your password is ***" in text for text in texts) and any("user *** may not" in text for text in texts)
    for text in texts:
        assert password not in text and token not in text, text[:2000]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://u:SECRETpw@[::1]:8000/v1?code=SECRETX", "http://[::1]:8000/v1?code=***"),
        ("http://u@ser:p@SECRET@[fe80::1%25eth0]:80/v1", "http://[fe80::1%25eth0]:80/v1"),
        ("http://user:pa/SECRET@host:8000/v1", "http://host:8000/v1"),
        ("http://user:p%40SECRET@host/v1?x=SECRET&api-version=2", "http://host/v1?x=***&api-version=2"),
        ("http://host/v1?e=a@SECRET.example&api-version=2", "http://host/v1?e=***&api-version=2"),
        ("https://u:p?SECRET@host/v1?code=k@SECRET", "https://host/v1?code=***"),
        ("https://u:p#SECRET@evil@host/v1", "https://host/v1"),
        ("http://host/v1?SECRETTOKEN&api-version=2#SECRETFRAG", "http://host/v1?***&api-version=2#***"),
    ],
)
def test_a_url_is_shown_without_its_credentials_and_secrets_whatever_they_hold(url: str, shown: str) -> None:
    """config.shown_url, the one form of a URL in every message, page and file: userinfo holding
    `@`, `:`, `/`, `%`, `?` or `#`, IPv6 hosts and ports, `@` in a query value, bare query items
    and fragments; what the form keeps is the host the request goes to."""
    from coinflip.secrets import shown_url

    assert shown_url(url) == shown
