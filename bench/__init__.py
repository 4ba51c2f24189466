"""clockd benchmarks: programs that print figures next to the issues' goals (not timed tests)."""

from typing import Any


def relayed(result: Any) -> int:
    """Rows a ``Store.relay`` moved, from this tree's ``Relayed`` or the int an older tree
    returns (``bench.worker --old`` and ``bench.store_ab`` run the other tree's store)."""
    return result if isinstance(result, int) else int(result.moved)


def overlap(new_occurrence: Any, schedule: Any) -> dict[str, Any]:
    """The ``overlap`` keyword of a ``NewOccurrence`` as the materializer fills it (the
    schedule's policy: without it the claim judges every batch), or none for an older
    tree's ``NewOccurrence``, which has no such field (before schema 0018)."""
    return {"overlap": schedule.definition.overlap} if "overlap" in new_occurrence._fields else {}
