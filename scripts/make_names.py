"""Build src/coinflip/_data/names.txt: lowercase first names from Faker's locales.

Run once by a maintainer (`python scripts/make_names.py`); the package ships the result so
users never need Faker. Only Latin-script names (accents and hyphens kept) whose length fits
the official set's prompt-length statistics are taken.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import zlib
from pathlib import Path

import faker.providers.person as person

MIN_LEN, MAX_LEN = 4, 14
SHORT_LEN = 5  # names this short are thinned so the mean name length matches the official set's (~6.9)
SHORT_SHARE = 28  # percent of short names kept, chosen by a stable hash
ATTRS = ("first_names", "first_names_male", "first_names_female", "first_names_nonbinary")
LATIN = re.compile(
    r"^[a-zà-öø-ÿāăąćčďđēėęěğīįıķļłńņňōőœřśşšţťūůűųźżžșț]+(-[a-zà-öø-ÿāăąćčďđēėęěğīįıķļłńņňōőœřśşšţťūůűųźżžșț]+)?$"
)
OUT = Path(__file__).resolve().parents[1] / "src" / "coinflip" / "_data" / "names.txt"


def keep(name: str) -> bool:
    return len(name) > SHORT_LEN or zlib.crc32(name.encode()) % 100 < SHORT_SHARE


def locale_names(locale: str) -> set[str]:
    try:
        provider = importlib.import_module(f"{person.__name__}.{locale}").Provider
    except (ImportError, AttributeError):
        return set()
    found: set[str] = set()
    for attr in ATTRS:
        value = getattr(provider, attr, None)
        if value is None or isinstance(value, property):
            continue
        for name in value.keys() if isinstance(value, dict) else value:
            name = name.strip().lower()
            if LATIN.match(name) and MIN_LEN <= len(name) <= MAX_LEN and keep(name):
                found.add(name)
    return found


def main() -> None:
    names: set[str] = set()
    for module in pkgutil.iter_modules(person.__path__):
        names |= locale_names(module.name)
    OUT.write_text("\n".join(sorted(names)) + "\n", encoding="utf-8")
    print(f"{len(names)} names -> {OUT}")


if __name__ == "__main__":
    main()
