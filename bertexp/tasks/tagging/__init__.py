"""Token tagging (NER, POS, chunking) on CoNLL / JSONL files.

The task (gin-registered) is in `task`; `prepare` declares its `bertexp
prepare` subcommands. Importing this package imports nothing else.
"""
