"""`python -m coinflip`: the command, entered where the stop signals are handled first (_entry.py)."""

from ._entry import main

main()
