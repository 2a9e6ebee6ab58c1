"""Counts k * alpha^k tokens per pass: only the case where all k drafts are kept, and no token of the target's own."""

FAILS = ["expected_accepted"]


def expected_accepted(alpha, k):
    return k * alpha**k
