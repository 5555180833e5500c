"""Sentence and sentence-pair classification and regression (GLUE-style).

The task (gin-registered) is in `task`; `prepare` declares its `bertexp
prepare` subcommands. Importing this package imports nothing else.
"""
