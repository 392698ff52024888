"""What a hostile server echoes of a run's secrets, and what a user's slip puts in a message: neither
reaches a file, the terminal or an exception, in any form."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinflip import run_task
from coinflip.errors import FatalAPIError

from .answer_server import AnswerServer, Seen, answer

KEY = "sk-live-SECRET-424242"


def test_a_key_cut_off_inside_a_long_message_is_masked_though_a_hint_follows(tmp_path: Path) -> None:
    """A 401 whose message is cut (…) inside the echoed key, then coinflip's hint: the key's start
    stood before the hint, where a cut key was masked only at the very end of a text."""

    def refuse(seen: Seen) -> bytes:
        return answer({"error": {"message": "x" * 1990 + seen.headers["authorization"].split()[-1]}}, 401)

    with AnswerServer(refuse) as srv, pytest.raises(FatalAPIError) as raised:
        run_task({"model": "m", "api_url": srv.url, "api_key": KEY, "limit": 1, "work_dir": str(tmp_path)})
    assert "x***… - check --api-key" in str(raised.value) and "sk-live" not in str(raised.value)
