"""Probes: memorised, pattern-matched, or tracked? One model on matched variants of the benchmark, each an
ordinary run, one verdict line per variant: variants.py writes the data and verdicts, page.py draws, run.py runs."""
