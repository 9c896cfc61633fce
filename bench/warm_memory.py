"""Touch fresh memory before a timed stage, so that the stage does not pay for this
VM's first touch. Standard library only: the Iceberg side of ``spark_cdc.py`` runs in
a venv without numpy or Firn.

On this development VM the first touch of memory the guest has not used lately costs
1-3 s per GiB, and erratically (the host reclaims idle guest memory), against about
0.2 s per GiB once the guest holds it. Whichever stage touched it first would pay for
the others; a stage that needs more memory than another (a load that sorts its rows
against one that does not) would pay more of it, on a cost a long-running machine
does not have. Memory touched here and freed goes back to the guest's free pages,
which the next allocation of any process on the machine gets.
"""

from __future__ import annotations


def warm(gib: float) -> None:
    """Touch ``gib`` GiB of fresh memory, then free it."""
    if gib > 0:
        block = b"\x01" * int(gib * (1 << 30))  # filled: every page is touched
        del block
