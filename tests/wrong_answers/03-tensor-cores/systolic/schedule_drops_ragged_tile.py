"""Cuts only whole tiles (range(0, M - rows + 1, rows)), dropping the ragged last tile along each dimension."""

FAILS = ["schedule"]


def schedule(M, N, K, rows, cols, dataflow):
    def spans(size, step):
        return [[start, start + step] for start in range(0, size - step + 1, step)]

    if dataflow == "os":
        return [{"m": m, "n": n, "k": [0, K]} for m in spans(M, rows) for n in spans(N, cols)]
    return [{"m": [0, M], "n": n, "k": k} for n in spans(N, cols) for k in spans(K, rows)]
