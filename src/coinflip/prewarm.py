"""What to load while the first requests are in flight, so neither the first replies nor the
report wait for an import. Imports hold the GIL, so the runner starts this in a thread a moment
after the first wave of requests is on the wire."""

from __future__ import annotations

import io

PREWARM_AFTER_S = 0.05


def prewarm() -> None:
    """Most urgent first: PyYAML for the run's config (written when the first reply lands), the
    scoring modules, then one tiny report, scored and printed to nowhere, for numpy's lazy parts
    and rich."""
    import yaml  # noqa: F401

    from .pages.summary import print_summary
    from .scoring.report import build_report
    from .scoring.scorer import Scorer

    scorer = Scorer()
    scorer.add({"id": 0, "target": "YES", "reply": "ANSWER: YES", "error": None})
    from rich.console import Console

    saved = {"config": {"model": "-"}, "fingerprint": {"dataset": {"source": "-", "split": "-", "sha256": "-"}}}
    print_summary(build_report(saved, "-", scorer, "coinflip"), None, Console(file=io.StringIO()))
