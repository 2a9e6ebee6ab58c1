"""Automatic differentiation: a reverse-mode engine and the backward passes of the layers models are built of."""
