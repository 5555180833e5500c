"""Multiple choice (SWAG / RACE-style): a context and N endings.

The task (gin-registered) is in `task`; `prepare` declares its `bertexp
prepare` subcommands. Importing this package imports nothing else.
"""
