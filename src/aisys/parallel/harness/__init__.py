"""Trusted drivers for grading chapter 5 on real processes (`Student.call_ranks(..., harness=...)`).

A harness runs on each rank in the clean room: it builds what training would (a model, its
data shard), calls the student's functions where training would call them, records what
the check reads (collectives, with its own marks between them, through
`aisys.collectives.traffic`), and returns plain data. A harness module imports no reference
(the answer key never enters the clean room) and keeps no module-level state a student's
code could reach.
"""
