"""Scoring stage: extract an answer from each reply, count, and turn the counts into a report."""
