"""Cuts K into array-sized pieces in output-stationary too, paying the fill and drain once per piece."""

FAILS = ["schedule"]


def schedule(M, N, K, rows, cols, dataflow):
    def spans(size, step):
        return [[start, min(start + step, size)] for start in range(0, size, step)]

    if dataflow == "os":
        return [{"m": m, "n": n, "k": k} for m in spans(M, rows) for n in spans(N, cols) for k in spans(K, rows)]
    return [{"m": [0, M], "n": n, "k": k} for n in spans(N, cols) for k in spans(K, rows)]
