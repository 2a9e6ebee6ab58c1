"""Automatic differentiation: a small reverse-mode engine (engine.py) and programs as plain data (programs.py)."""
