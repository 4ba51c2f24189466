"""The ``clockd`` program's edge: argument parsing, signals, sd_notify, exit codes."""
