"""Collective communication on real processes: a launcher, a traffic recorder, and the algorithms of chapter 6.

This package imports nothing on its own, so that a grading kernel may be given the
launcher (`launch`) and the recorder (`traffic`) while the reference algorithms stay hidden.
"""
