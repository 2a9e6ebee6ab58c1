"""Checks of each exercise, one module per exercise, in chapter packages."""
