"""Systolic arrays: a cycle-accurate model (`array`), pictures of its traces (`pictures`) and the dataflows' steps.

Import the modules you need (`from aisys.systolic import array`): this package imports none of
them, so that the model can be handed to students while `dataflows`, the answer key of the
systolic exercise, stays with the grader.
"""
