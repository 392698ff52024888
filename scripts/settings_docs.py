"""The settings reference's tables (docs/settings.md), derived from TaskConfig's declarations:
`python scripts/settings_docs.py` rewrites them between their markers; a test checks the page matches."""

from __future__ import annotations

import sys
from pathlib import Path

from coinflip.config import GENERATION_KEYS, Setting, settings
from coinflip.config.declare import EVAL_ONLY
from coinflip.config.evalscope import GENERATION_DROPPED, GENERATION_TO_TASK

ROOT = Path(__file__).resolve().parents[1]
PAGE = "docs/settings.md"  # from the repository's root
MARKERS = {
    name: (f"<!-- BEGIN {name} (generated: python scripts/settings_docs.py) -->", f"<!-- END {name} -->")
    for name in ("settings", "evalscope")
}
NOTES = {  # where a setting EvalScope also has differs from "same meaning"
    "limit_mode": "`shuffle: true` is `random`, `shuffle: false` is `first`; coinflip's default is `stratified`",
    "limit": "coinflip draws a stratified sample by default; `--limit-mode first` takes EvalScope's first N",
    "timeout": "per attempt; EvalScope's `generation_config.timeout` too",
    "few_shot_num": "EvalScope 1.14.1 refuses any but 0 for coin_flip (`few_shot_mode='disabled'`); "
    "coinflip runs the specification's few-shot template",
    "few_shot_random": "EvalScope takes the first N by default; coinflip draws them at random (seeded)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(s: Setting) -> str:
    if s.default in (None, "", {}, []) or s.kind == "bool" and s.default is False:
        return ""
    if isinstance(s.default, list):
        return f"`{', '.join(map(str, s.default))}`"
    return f"`{s.default}`"


def _flag(s: Setting) -> str:
    return f"`{s.flag}`" if s.flag else f"(Python: `{s.name}=`)"


def settings_table() -> str:
    lines = ["| option | TaskConfig field | default | meaning |", "| --- | --- | --- | --- |"]
    for s in settings():
        if s.unused:
            continue
        where = " (eval only)" if s.name in EVAL_ONLY else ""
        lines.append(f"| {_flag(s)} | `{s.name}` | {_default(s)} | {_cell(s.help)}{where} |")
    return "\n".join(lines)


def evalscope_table() -> str:
    lines = ["| EvalScope | coinflip | note |", "| --- | --- | --- |"]
    for s in settings():
        if not s.evalscope or s.unused:
            continue
        ours = f"`{s.flag.split('/')[0]}`" if s.flag else f"`{s.name}=`"
        theirs = f"`{s.name}` (`--{s.name.replace('_', '-')}`)" if s.evalscope == s.name else f"`{s.evalscope}`"
        lines.append(f"| {theirs} | {ours} | {NOTES.get(s.name, 'same meaning')} |")
    lines.append(
        "| `eval_type`: `openai_api`, `service`, `server` | HTTP requests | `mock_llm` needs a baseline model; "
        "`llm_ckpt` is refused with how to serve the checkpoint |"
    )
    lines.append("| `dataset_hub: local` | `--dataset-hub local` | with `local_path` / `--dataset-path` |")
    lines.append("| `limit: 0` | all questions | as in EvalScope |")
    for key, field in GENERATION_TO_TASK.items():
        if key == "retries":
            continue  # its own row above
        lines.append(f"| `generation_config.{key}` | `--{field.replace('_', '-')}` | moved to the setting of its own |")
    for key, why in GENERATION_DROPPED.items():
        lines.append(f"| `generation_config.{key}` | accepted | {_cell(why)} |")
    lines.append("| `generation_config.stop_seqs` | `stop` | same meaning |")
    known = ", ".join(f"`{k}`" for k in GENERATION_KEYS)
    lines.append(
        f"| other `generation_config` keys | {known} | sent as given; unknown keys are refused with this list |"
    )
    for s in settings():
        if s.unused:
            flag = s.flag.split("/")[0] if s.flag else s.name
            lines.append(f"| `{s.name}` (`{flag}`) | accepted with a note | {_cell(s.unused)} |")
    return "\n".join(lines)


TABLES = {"settings": settings_table, "evalscope": evalscope_table}


def rewrite(text: str) -> str:
    for name, (begin, end) in MARKERS.items():
        head, found, rest = text.partition(begin)
        if not found:
            raise SystemExit(f"the page lacks the marker {begin}")
        _, _, tail = rest.partition(end)
        text = f"{head}{begin}\n{TABLES[name]()}\n{end}{tail}"
    return text


def main(argv: list[str] | None = None) -> None:
    path = Path((argv or sys.argv[1:] or [str(ROOT / PAGE)])[0])
    path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
