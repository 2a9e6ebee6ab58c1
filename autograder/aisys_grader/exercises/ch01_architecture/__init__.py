"""Checks of chapter 1: machine architecture and performance models."""
