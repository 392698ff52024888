"""Probes: memorised, pattern-matched, or tracked? One model on matched variants of the benchmark.

A CoinFlip score says how often a model was right, not why. `coinflip probe` runs the evaluated
set (the base), a fresh twin matched to it (a contamination signal), surface variants written from
the very same sequences (tails-up start, the other side asked, rephrased actions, idle sentences,
names in other scripts, Chinese) and an accuracy curve over the number of people, each as an
ordinary run, and says in one line per variant what the difference to the base means.

variants.py writes the data (pure), verdicts.py reads the runs and words the verdicts (pure),
page.py draws the page, run.py orchestrates.
"""
