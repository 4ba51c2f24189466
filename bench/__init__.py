"""clockd benchmarks: programs that print figures next to the issues' goals (not timed tests)."""
