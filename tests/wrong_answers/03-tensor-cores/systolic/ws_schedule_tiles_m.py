"""Tiles M in weight-stationary too, loading the same weights again for every block of rows of A."""

FAILS = ["schedule"]


def schedule(M, N, K, rows, cols, dataflow):
    def spans(size, step):
        return [[start, min(start + step, size)] for start in range(0, size, step)]

    if dataflow == "os":
        return [{"m": m, "n": n, "k": [0, K]} for m in spans(M, rows) for n in spans(N, cols)]
    return [{"m": m, "n": n, "k": k} for m in spans(M, rows) for n in spans(N, cols) for k in spans(K, rows)]
