"""`coinflip` (the console script) and `python -m coinflip`: the stop signals end the command in
one line from its first code, before the CLI loads (_signals.py)."""

import gc

from ._signals import handle_early


def main() -> None:
    handle_early()
    from .cli import main as command

    gc.freeze()  # what the imports made lives as long as the process: no collection walks it again (7% of --limit 1)
    command()


if __name__ == "__main__":
    main()
