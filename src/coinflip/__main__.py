"""`coinflip` (the console script) and `python -m coinflip`: the stop signals end the command in
one line from its first code, before the CLI loads (_signals.py)."""

from ._signals import handle_early


def main() -> None:
    handle_early()
    from .cli import main as command

    command()


if __name__ == "__main__":
    main()
