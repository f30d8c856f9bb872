"""Differential fuzzing of ember.compile against eager (README.md)."""
