"""Test support: `coinflip.testing.server` (nothing imported here, so `python -m` runs it cleanly)."""
