"""Analyses and rewrites over FX graphs, one module per pass."""
