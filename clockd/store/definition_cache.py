"""The claim path's cache of decoded definitions: (schedule_id, version) -> what the claims
take from that definition (``clockd.store.codec.ClaimParts``).

A version never changes once written, so an entry never goes stale (a deleted schedule's
entries are only wasted room). The cache is bounded, and large enough for the schedules
a worker claims in a cycle at the usual rates. Claims come in a cycle — each schedule
once per period, in due order — so when more schedules fire per cycle than the cache
holds, evicting the oldest (LRU) or everything at once (as it did) means no entry is
ever found again, and even replacing a random entry on every miss keeps few (each is
replaced within a cycle). So a full cache admits only every ``REPLACE_EVERY``-th
missed definition, in the place of a random entry: the cached set changes slowly, about
``capacity / working set`` of the claims find their definition, and room held by deleted
schedules is still given back. Hits and misses are counted for the
``clockd_definition_cache_*`` metrics.

Invariants: at most ``capacity`` entries; ``get`` never returns a definition stored
under another key; one thread at a time (the store's writer).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Generic, TypeVar

Key = tuple[str, int]
V = TypeVar("V")

# A claim's parts are a tuple of 6, the target and retry values shared between definitions
# alike: ~0.55 KB per entry with its key and name (tracemalloc, 30-character names),
# 65,536 entries ~35 MB per worker (a whole decoded definition took about twice that).
DEFAULT_CAPACITY = 65_536
# A full cache replaces a random entry on every this-many-th insert (see above).
REPLACE_EVERY = 8


class DefinitionCache(Generic[V]):
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, capacity)
        self._entries: dict[Key, tuple[int, V]] = {}  # key -> (slot in _keys, definition)
        self._keys: list[Key] = []
        self._random = random.Random()
        self.hits = 0
        self.misses = 0
        self._refused = 0  # inserts into the full cache since the last replacement

    def __len__(self) -> int:
        return len(self._entries)

    def found(self, keys: Iterable[Key]) -> tuple[dict[Key, V], list[Key]]:
        """(the cached definitions of ``keys``, the keys not cached), counting both."""
        entries = self._entries
        hits: dict[Key, V] = {}
        missing: list[Key] = []
        for key in keys:
            entry = entries.get(key)
            if entry is None:
                missing.append(key)
            else:
                hits[key] = entry[1]
        self.hits += len(hits)
        self.misses += len(missing)
        return hits, missing

    def put(self, key: Key, definition: V) -> None:
        entries, keys = self._entries, self._keys
        entry = entries.get(key)
        if entry is not None:
            entries[key] = (entry[0], definition)
            return
        if len(keys) < self.capacity:
            entries[key] = (len(keys), definition)
            keys.append(key)
            return
        self._refused += 1
        if self._refused < REPLACE_EVERY:
            return
        self._refused = 0
        slot = self._random.randrange(len(keys))
        del entries[keys[slot]]
        keys[slot] = key
        entries[key] = (slot, definition)
