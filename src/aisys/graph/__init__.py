"""Computation graphs as plain data: an IR, a fusion pass with its cost model and numpy executor, Triton codegen."""
