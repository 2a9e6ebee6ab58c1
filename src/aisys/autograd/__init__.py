"""Automatic differentiation: a reverse-mode engine (engine, programs as plain data in programs), the backward passes
of the layers models are built of (backward) and activation recomputation (recompute)."""
