"""Checks of chapter 2: GPU programming, thread by thread."""
