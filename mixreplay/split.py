"""The split rule's old home (``from mixreplay.split import split_counts`` keeps working).

It lives in :mod:`mixreplay.mixing.split`, with the rest of the mixing rule.
"""

from mixreplay.mixing.split import _largest_remainder, carried_split, split_counts  # noqa: F401

__all__ = ["carried_split", "split_counts"]
