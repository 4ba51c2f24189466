"""clockctl: the command-line interface of clockd."""
