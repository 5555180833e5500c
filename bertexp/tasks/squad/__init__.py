"""Extractive question answering on SQuAD v1.1 / v2.0 files.

The task (gin-registered) is in `task`; `prepare` declares its `bertexp
prepare` subcommands. Importing this package imports nothing else.
"""
