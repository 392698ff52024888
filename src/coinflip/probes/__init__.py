"""Probes: memorised, pattern-matched, or tracked? One model on matched variants of the benchmark (a fresh
twin, surface variants from the same sequences, a length curve), each an ordinary run, with one verdict
line per variant. variants.py writes the data and words the verdicts, page.py draws, run.py runs.
"""
