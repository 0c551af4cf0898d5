"""Free blocks kept sorted by size, then address: the order in which an allocator that takes
the smallest block that fits (the lowest address among equals) finds them. Shared by the
compiled allocator replays (`caching_allocator`, `c_heap`); a pool is an array of block ids
with a count of those in use, the blocks' sizes and addresses in arrays of their own.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["insert", "position", "remove_at"]


@numba.njit(cache=True)
def position(pool: np.ndarray, count: int, size_of: np.ndarray, address_of: np.ndarray,
             size: int, address: int) -> int:
    """Where (size, address) is, or would go, among the `count` free blocks of `pool` (their
    ids, sorted by size, then address: the first that fits a request is the allocator's pick)."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        block = pool[middle]
        if size_of[block] < size or (size_of[block] == size and address_of[block] < address):
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(cache=True)
def insert(pool: np.ndarray, count: int, size_of: np.ndarray, address_of: np.ndarray, block: int) -> None:
    """Free `block` into its place among the `count` of `pool`, which has room for one more."""
    place = position(pool, count, size_of, address_of, size_of[block], address_of[block])
    for i in range(count, place, -1):
        pool[i] = pool[i - 1]
    pool[place] = block


@numba.njit(cache=True)
def remove_at(pool: np.ndarray, count: int, place: int) -> None:
    """Take the block at `place` out of the `count` of `pool`, keeping the rest in order."""
    for i in range(place, count - 1):
        pool[i] = pool[i + 1]
