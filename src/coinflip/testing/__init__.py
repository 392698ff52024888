"""Test support shipped with the package: a real OpenAI-compatible HTTP server that knows the answers.

Import from `coinflip.testing.server`; nothing is imported here so `python -m` runs it cleanly.
"""
