"""Uses (1 - alpha^k) / (1 - alpha): one term short, as if the pass's own token (or the bonus) did not count."""

FAILS = ["expected_accepted"]


def expected_accepted(alpha, k):
    if alpha == 1:
        return float(k)
    return (1 - alpha**k) / (1 - alpha)
