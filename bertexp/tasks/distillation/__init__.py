"""Knowledge distillation of any task's teacher into a smaller student.

The task (gin-registered) is in `task`. Importing this package imports
nothing else.
"""
