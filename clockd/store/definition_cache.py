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

An idle worker fills it ahead of a burst staged in the queue
(``Store.read_ahead_definitions``: ``unknown`` and ``put`` with ``ahead``, counted in
``read_ahead``), only while it has room: a full cache keeps what it holds.

Invariants: at most ``capacity`` entries; ``found`` never returns a definition stored
under another key; safe from two threads (the claim fills it on the store's writer,
the read-ahead on a reader: SQLite runs them on threads of their own).
"""

from __future__ import annotations

import random
import threading
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
        self.read_ahead = 0  # definitions put ahead of their claims
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def found(self, keys: Iterable[Key]) -> tuple[dict[Key, V], list[Key]]:
        """(the cached definitions of ``keys``, the keys not cached), counting both."""
        entries = self._entries
        hits: dict[Key, V] = {}
        missing: list[Key] = []
        with self._lock:
            for key in keys:
                entry = entries.get(key)
                if entry is None:
                    missing.append(key)
                else:
                    hits[key] = entry[1]
            self.hits += len(hits)
            self.misses += len(missing)
        return hits, missing

    def unknown(self, keys: Iterable[Key]) -> list[Key]:
        """The keys of ``keys`` not cached, in their order, once each (not counted: no claim
        asked for them)."""
        entries = self._entries
        with self._lock:
            return [key for key in dict.fromkeys(keys) if key not in entries]

    @property
    def room(self) -> int:
        """Entries that can still be added without replacing one."""
        return max(0, self.capacity - len(self._keys))

    def put(self, key: Key, definition: V, *, ahead: bool = False) -> None:
        """Cache ``definition``; ``ahead``: read before any claim asked for it, admitted only
        into free room (never in place of an entry the claims use)."""
        with self._lock:
            self._put(key, definition, ahead)

    def _put(self, key: Key, definition: V, ahead: bool) -> None:
        entries, keys = self._entries, self._keys
        entry = entries.get(key)
        if entry is not None:
            entries[key] = (entry[0], definition)
            return
        if len(keys) < self.capacity:
            entries[key] = (len(keys), definition)
            keys.append(key)
            self.read_ahead += ahead
            return
        if ahead:
            return
        self._refused += 1
        if self._refused < REPLACE_EVERY:
            return
        self._refused = 0
        slot = self._random.randrange(len(keys))
        del entries[keys[slot]]
        keys[slot] = key
        entries[key] = (slot, definition)
