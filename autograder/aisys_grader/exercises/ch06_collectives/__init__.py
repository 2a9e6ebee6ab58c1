"""Checks of chapter 6: collective communication."""
