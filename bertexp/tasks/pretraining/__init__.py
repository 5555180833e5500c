"""Masked-LM + next-sentence pretraining from plain text.

The task (gin-registered) is in `task`; `prepare` declares its `bertexp
prepare` subcommands. Importing this package imports nothing else.
"""
