"""Checks of chapter 7: LLM inference."""
