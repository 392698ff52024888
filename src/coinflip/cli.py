"""The `coinflip` command. Heavy modules are imported inside each command so --help stays instant."""

from __future__ import annotations

import sys

if __name__ == "__main__":  # `python -m coinflip.cli`: a stop while click loads ends in one line
    from ._signals import handle_early

    handle_early()

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from ._args import OnceGroup, PathText, WholeOption
from ._terminal import one_line, quiet_pipes
from .config import METRIC_COMPATS, SPLITS, Setting, TaskConfig, settings
from .config.declare import EVAL_ONLY
from .errors import UNUSABLE_PATH, CoinflipError, ConfigError, RunIncomplete, named_output


@click.group(cls=OnceGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="coinflip")
def app() -> None:
    """Evaluate how well language models track a coin's state (the CoinFlip benchmark).

    \b
    Quick start (the first three need no server and no network):
      coinflip eval --model oracle --limit 20          # a baseline, end to end
      coinflip eval --model smollm2 --limit 20 --api-mode completions --few-shot-num 3 \\
          --prompt-template direct --generation-config max_tokens=8,temperature=0,logprobs=5
                                                       # a real model via llama.cpp, 3 worked examples
      coinflip view                                    # every run in ./outputs, in one page
      coinflip eval --model M --api-url http://127.0.0.1:8000/v1 --datasets coin_flip --limit 10
                                                       # a model behind an OpenAI-compatible server
    """


def setting_options(function: Callable[..., Any]) -> Callable[..., Any]:
    for s in reversed(settings()):
        if s.flag:
            function = _option(s)(function)
    return function


def _option(s: Setting) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Every option defaults to None, so a resume can tell what was given."""
    shown = s.help + (" (eval only)" if s.name in EVAL_ONLY else "")  # a probe refuses these in one line
    if s.default not in (None, "", [], {}) and s.kind != "bool":
        shown += f"  [default: {', '.join(s.default) if isinstance(s.default, list) else s.default}]"
    kwargs: dict[str, Any] = {"default": None, "help": shown, "hidden": bool(s.unused), "metavar": s.metavar}
    if s.kind == "choice":
        kwargs["type"] = click.Choice(s.choices)
        kwargs["metavar"] = None
    elif s.kind in ("int", "float"):
        kwargs["type"] = int if s.kind == "int" else float
    elif s.kind == "list":
        kwargs["multiple"] = True
    elif s.kind == "bool":
        kwargs["metavar"] = None
        if "/" not in (s.flag or ""):
            kwargs["is_flag"] = True
    return click.option(s.flag or "", s.name, cls=WholeOption if s.kind == "json" else click.Option, **kwargs)


def given(opts: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items() if v is not None and v != ()}


@app.command("eval")
@click.option("--config", "config_file", cls=WholeOption, metavar="FILE", help="A YAML or JSON task config, as "
              "run_task takes it (EvalScope's included); the flags given override it.")  # fmt: skip
@setting_options
def eval_command(config_file: str | None, **opts: Any) -> None:
    """Run the benchmark and write a run directory with predictions, reviews and reports.

    \b
    Exit codes: 0 done, 1 incomplete (samples without a reply, interrupted, or stopped by --max-cost), 2 bad input.
    `coinflip eval --use-cache RUN_DIR` alone resumes a run with its saved settings.
    """
    from .config.files import as_config
    from .run.runner import run_task

    config = as_config(config_file, given(opts))  # the file's settings, the flags given over them
    report = run_task(config)
    if not report or "batch_written" in report:  # --dry-run: nothing ran; --batch-write: the request file is all
        return
    work = Path(config.work_dir).expanduser()
    own = work if config.no_timestamp else work / report["run"]
    _settle(report, Path(config.use_cache).expanduser() if config.use_cache else own)


def _settle(report: Mapping[str, Any], root: Path) -> None:
    """After a run or a rescore: its work directory's index.html (never raises), and exit 1 if incomplete."""
    from .pages import index
    from .run.stop import Interrupted, pending, stopped_by
    from .rundir import load_saved_config

    config = load_saved_config(root, check=False)["config"]
    late = pending()  # a signal while the report was written: the refresh is what it stops
    try:
        if config.get("html_report", True) and late is None:
            index.refresh(index.work_dir_of(root, config))
    except Interrupted as exc:  # the run is reported: a stop ends the refresh, not what the run was
        late = exc.args[0] if exc.args else "SIGINT"
    if late is not None and config.get("html_report", True):
        print(f"note: {stopped_by(late)} before {index.REFRESH_LEFT}", file=sys.stderr)
    if not report["complete"] and not report.get("errors_ignored"):
        sys.exit(1)


def _word(flag: str, choices: list[str], default: str | None, help_text: str) -> Callable[[Any], Any]:
    """An option taking one of a few words; the error names them, the help shows TEXT and the default."""
    kind, shown = click.Choice(choices), default is not None
    return click.option(flag, default=default, show_default=shown, type=kind, metavar="TEXT", help=help_text)


@app.command()
@click.option(
    "--people", default="4", show_default=True, help="People per question: a number, or a range such as 2-12."
)
@click.option("--count", default=1000, show_default=True, type=int, help="How many questions.")
@click.option("--seed", default=0, show_default=True, type=int, help="Same seed, same questions.")
@click.option(
    "--out",
    required=True,
    type=PathText(dir_okay=False, path_type=Path),
    help="JSONL file to write (question, answer).",
)
@_word("--start", ["heads", "tails"], "heads", "Side the coin starts on: heads or tails.")
@_word("--ask", ["heads", "tails"], None, "Side the question asks about: heads or tails  [default: the start side]")
@_word(
    "--phrasing",
    ["plain", "rephrased"],
    "plain",
    "plain: 'flips the coin' / 'does not flip the coin'; rephrased: 'turns the coin over' / "
    "'leaves the coin as it is'.",
)
@click.option(
    "--idle",
    default=0.0,
    show_default=True,
    type=float,
    help="Chance of a sentence that changes nothing after each step.",
)
@_word("--names", ["pool", "scripts"], "pool", "pool: the shipped names; scripts: names in other scripts.")
@_word("--language", ["en", "zh"], "en", "en, or zh: in Chinese.")
@named_output()
def generate(people: str, count: int, seed: int, out: Path, start: str, ask: str | None, **words: Any) -> None:
    """Generate a fresh CoinFlip set, streamed to disk.

    Each person flips with probability 0.5; the answer is computed from the sequence (in the
    official form: YES exactly when the number of flips is even). Use it for uncontaminated sets
    and longer sequences than the official 2-4. The other options write the same sequences
    another way (the probes' variants); the defaults give the official form, byte for byte.
    Chinese questions go with --prompt-template zh (replies still end in ANSWER: YES or NO).
    """
    from .data.generate import PeopleRange, generate_file
    from .data.grammar import Style, Surface

    if not 0.0 <= words["idle"] <= 1.0:
        raise ConfigError(f"--idle must be a chance between 0 and 1, got {words['idle']}")
    surface = Surface(start, ask or start, words["phrasing"], words["language"])
    style = Style(surface, words["idle"], words["names"])
    written = generate_file(out, PeopleRange.parse(people), count, seed, style)
    click.echo(f"wrote {written} question{'s' * (written != 1)} (people {people}, seed {seed}) to {out}", err=True)


@app.command()
@click.argument("path", required=False, type=PathText())
@click.option("--split", default=None, type=click.Choice(SPLITS), help="Only this split.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(path: str | None, split: str | None, as_json: bool) -> None:
    """Data statistics: rows, people and flips, YES share, prompt lengths.

    Without PATH: the bundled splits. PATH may be a file or a directory with test.* and validation.*.
    """
    import json

    from .data.grammar import bundled_dir
    from .data.load import dataset_stats, open_split
    from .data.prompts import ZERO_SHOT_TEMPLATE

    target = Path(path) if path else bundled_dir()
    named = {s: s for s in ([split] if split else SPLITS)} if target.is_dir() else {str(target): "test"}
    results = {name: dataset_stats(open_split(target, s)[0], ZERO_SHOT_TEMPLATE) for name, s in named.items()}
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    for name, s in results.items():
        p = s["prompt_length"]
        click.echo(f"{name}: {s['rows']} rows, YES share {s['yes_share']:.3f}")
        for key in ("people", "flips"):
            click.echo(f"  {key + ':':<7} {', '.join(f'{k}: {v}' for k, v in s[key].items())}")
        click.echo(
            f"  prompt length (0-shot): mean {p['mean']:.2f}, min {p['min']}, max {p['max']}, std {p['std']:.2f}"
        )


@app.command()
@click.argument("run_dir", type=PathText(file_okay=False))
@click.option(
    "--metric-compat", default=None, type=click.Choice(METRIC_COMPATS), help="Arithmetic to use (default: the run's)."
)
@named_output()
def rescore(run_dir: str, metric_compat: str | None) -> None:
    """Recompute reviews and reports from a run's saved predictions; calls no model.

    In an arithmetic other than the run's own, they are written beside the run's report
    (reports/MODEL/coin_flip.evalscope.json), which stays as it was.

    Exit codes: 0 done, 1 the run is incomplete (resume it), 2 not a run directory.
    """
    from .run.runner import rescore as do_rescore

    _settle(do_rescore(run_dir, metric_compat), Path(run_dir))


@app.command("answers")
@click.argument("run_dir", type=PathText(file_okay=False))
@click.option("--format", "form", default="csv", show_default=True, type=click.Choice(["csv", "jsonl"]))
@click.option(
    "--out",
    default=None,
    type=PathText(dir_okay=False, allow_dash=True),
    help="File to write  [default: RUN_DIR/answers.csv or .jsonl]; - for stdout.",
)
@named_output()
def answers_command(run_dir: str, form: str, out: str | None) -> None:
    """Every sample on one line: question, reply, extracted verdict, target and result (right,
    wrong, invalid, error), with the forced answer and P(YES) where the run has them.

    Joins the run's predictions and reviews, as EvalScope's reviews file holds them together.
    """
    from .pages.answers import Left, answers, default_path, save, write
    from .rundir import RunDir

    run, left = RunDir.open(run_dir), Left()
    if out == "-":
        if sys.stdout is None:  # closed (>&-)
            raise ConfigError("--out -: standard output is closed; give --out FILE")
        write(answers(run, left), sys.stdout, form, terminal=sys.stdout.isatty())
    else:
        path = Path(out) if out else default_path(run, form)
        click.echo(f"wrote {save(run, path, form, out is not None, left)} answers to {path}", err=True)
    if said := left.line(run):
        click.echo(said, err=True)


@app.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=PathText())
@click.option("--force", is_flag=True, help="Compare runs on different data, pairing only the samples they share.")
@click.option(
    "--out",
    default=None,
    type=PathText(file_okay=False, path_type=Path),
    help="Folder for compare.md and compare.json  [default: compare/ in the work directory "
    "the runs share, else ./outputs/compare]",
)
@named_output()
def compare_command(run_dirs: tuple[str, ...], force: bool, out: Path | None) -> None:
    """Leaderboard of runs on the same data, with paired McNemar tests between runs that share questions.

    Each argument is a run directory or a work directory (every run below it); folders without
    a usable report are skipped with a note, and runs that share no question with another are
    listed, not ranked or tested.
    """
    from .pages.compare import compare, default_out, print_result, write_files

    result = compare(list(run_dirs), force)
    print_result(result, write_files(result, out or default_out(result)))


@app.command("view")
@click.argument("work_dir", required=False, default="./outputs", type=PathText(path_type=Path))
@click.option("--open", "open_page", is_flag=True, help="Open the page in a browser.")
@named_output()
def view_command(work_dir: Path, open_page: bool) -> None:
    """Write WORK_DIR/index.html: every run under WORK_DIR (default ./outputs) in one page.

    \b
    A leaderboard (sortable, filterable), accuracy by number of people for chosen runs,
    latency and tokens, and two runs side by side with McNemar and the questions where they
    disagree. One self-contained file: no network. Broken and foreign folders are listed.
    """
    from .pages.index import view

    view(work_dir, open_page)


@app.command("probe")
@setting_options
@click.option(
    "--variants",
    default=None,
    help="Comma-separated variants besides the base set  [default: fresh,tails,inverted,rephrased,idle,scripts,zh]",
)
@click.option(
    "--lengths", default=None, help="People per question for the length curve, e.g. 2-8; 0: none  [default: 2-8]"
)
@click.option(
    "--length-count", default=None, type=int, help="Questions per length  [default: the base set's, at most 200]"
)
def probe_command(variants: str | None, lengths: str | None, length_count: int | None, **opts: Any) -> None:
    """Memorised, pattern-matched, or tracked? The model on matched variants of the benchmark.

    \b
    Runs the evaluated set (the base, with every setting `eval` takes), a fresh twin matched to
    it (a contamination signal), surface variants written from the same sequences (tails-up
    start, the question inverted, rephrased actions, idle sentences, names in other scripts,
    Chinese) and the accuracy curve over the number of people. Each is an ordinary run in one
    probe directory; probe.json and probe.html give each variant's metrics, its paired
    difference to the base (McNemar) and a verdict. `--use-cache PROBE_DIR` resumes a probe.
    Exit codes: 0 done, 1 incomplete, 2 bad input.
    """
    from .probes.run import ProbeOptions, probe, unfinished

    config = TaskConfig.of(**given(opts))  # validated once, before anything is generated
    if any(getattr(config, name) for name in EVAL_ONLY):
        flags = ", ".join("--" + name.replace("_", "-") for name in EVAL_ONLY)
        raise ConfigError(f"coinflip probe runs its variants online: {flags} are eval's")
    chosen = tuple(v.strip() for v in variants.split(",") if v.strip()) if variants is not None else None
    result = probe(config, ProbeOptions(chosen, lengths, length_count))
    click.echo(one_line(f"probe {result['model']}: {result['headline']}"))
    for v in result["variants"]:
        line = v.get("verdict") or f"accuracy {v['metrics']['accuracy']:.4f} on {v['samples']} samples"
        click.echo(one_line(f"  {v['title']:<24} {v['metrics']['accuracy']:.4f}  {line}"))
    if result["variants"] and result["variants"][0]["samples"] > result["base"]["questions"]:  # repeats
        click.echo("  (paired: each question by its majority vote; the accuracies count every answer)")
    if result["length"]["points"]:
        click.echo(one_line(f"  {'length':<24}         {result['length']['verdict']}"))
    click.echo(one_line(f"written: {result['directory']}/probe.html"))
    if (why := unfinished(result)) is not None:
        raise RunIncomplete(why)


def main(argv: list[str] | None = None) -> None:
    """A user-fixable problem ends as one line and exit 2, a stop signal as one line and exit 1.
    `argv` given: a call from Python, whose caller gets its signal handlers back."""
    from .run.stop import Interrupted, StopRequest, stopped_by

    stop = StopRequest()
    try:
        try:
            stop.install()
            with quiet_pipes():
                _dispatch(argv)
        finally:
            stop.restore() if argv is not None else stop.settle()
    except (Interrupted, KeyboardInterrupt, RuntimeError) as exc:  # one line, whenever it came
        stopped = exc.__cause__ if isinstance(exc, RuntimeError) else exc  # a stop inside a class's __set_name__
        if not isinstance(stopped, (Interrupted, KeyboardInterrupt)):  # (an import), which Python 3.11 wraps
            raise
        click.echo(stopped_by(stopped), err=True)
        sys.exit(1)


def _dispatch(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    odd = next((i for i, arg in enumerate(args) if not _utf8(arg)), None)
    if odd is not None:  # Python hands such bytes over as lone surrogates; nothing could write them
        flag = args[odd - 1].partition("=")[0] if odd and args[odd - 1].startswith("-") else ""  # not a value: a key
        named = f" (after {one_line(flag)!s})" if flag and _utf8(flag) else ""
        click.echo(f"error: argument {odd + 1}{named} holds bytes that are not UTF-8: give it as UTF-8 text", err=True)
        sys.exit(2)
    try:
        app.main(args=args, prog_name="coinflip", standalone_mode=False)
        if sys.stdout is not None:
            sys.stdout.flush()  # the output's last buffer, here: not a warning as Python exits
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
        click.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:  # past the files coinflip names (each says so itself): its output, on a full disk
        where = f": {one_line(exc.filename)}" if exc.filename else " (writing the output)"
        click.echo(f"error: {exc.strerror or exc}{where}", err=True)
        sys.exit(2 if exc.errno in UNUSABLE_PATH else 1)  # a path given that cannot be used is bad input


def _utf8(text: str) -> bool:
    return not any("\ud800" <= c <= "\udfff" for c in text)  # a lone surrogate: bytes that were not UTF-8


if __name__ == "__main__":
    main()
