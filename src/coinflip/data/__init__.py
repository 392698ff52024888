"""Data stage: load splits (bundled, files, hub cache), generate fresh sets, build prompts."""
