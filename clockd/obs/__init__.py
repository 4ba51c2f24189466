"""Observability: structured logging (``action`` on every line) and Prometheus metrics.

Invariants: no per-occurrence label on any metric (series stay bounded); no
secret or job environment value is ever logged.
"""
