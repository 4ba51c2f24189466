"""clockd benchmarks: programs that print figures next to the issues' goals (not timed tests)."""

from typing import Any


def relayed(result: Any) -> int:
    """Rows a ``Store.relay`` moved, from this tree's ``Relayed`` or the int an older tree
    returns (``bench.worker --old`` and ``bench.store_ab`` run the other tree's store)."""
    return result if isinstance(result, int) else int(result.moved)
