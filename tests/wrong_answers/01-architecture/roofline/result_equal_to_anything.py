"""Returns an object that claims to equal anything, the classic trick against `==` in a test."""

FAILS = ["gemm_cost"]


class Anything(dict):
    def __eq__(self, other):
        return True


def gemm_cost(M, N, K, dtype):
    return Anything(flops=0, bytes=0)
