"""LLM inference (chapter 7): a tiny transformer, attention, KV caches, batching, FlashAttention, speculative decoding.

This package imports none of its modules, so that a grading kernel may be given the model
(`model`) and reference attention (`attention`) while the answer keys of the exercises
(`kv_cache`, `paged`, `scheduler`, ...) stay with the grader. Import what you need:
`from aisys.inference import model`.
"""
