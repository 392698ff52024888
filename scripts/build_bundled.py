"""Regenerate the bundled splits in src/coinflip/_data from the package's own seeded generator.

`python scripts/build_bundled.py`; tests/test_generate.py checks the shipped files match.
"""

from __future__ import annotations

import json
from pathlib import Path

from coinflip.data.generate import BUNDLED_SEED, build_bundled, write_jsonl
from coinflip.data.load import MANIFEST, open_split

OUT = Path(__file__).resolve().parents[1] / "src" / "coinflip" / "_data"

if __name__ == "__main__":
    manifest = {}
    for split, rows in build_bundled(BUNDLED_SEED).items():
        with (OUT / f"{split}.jsonl").open("w", encoding="utf-8") as handle:
            write_jsonl(iter(rows), handle)
        _, sha = open_split(OUT, split)
        manifest[split] = {"rows": len(rows), "sha256": sha}
        print(f"{split}: {len(rows)} rows")
    (OUT / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
