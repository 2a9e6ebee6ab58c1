"""The detector that test_exercises.py runs on every known-wrong answer's hidden failure messages (hidden_data.py)
finds hidden data printed in every way a message prints it, and lets sizes, shapes and measurements through."""

import numpy as np

from hidden_data import Secrets


# --- the detector itself ----------------------------------------------------------------------------

def test_detector_finds_printed_data_and_allows_sizes():
    secrets = Secrets({"sequential"})
    data = np.array([0.123456789, -1.5e-3, 7.25, 3.0, 1000.5])
    secrets.add([data, 1234, 0.7, np.zeros((1000, 8)), "a secret prompt", {"block_table": [5, 2, 9, 11]}, 4096,
                 0.5, np.array([0, 11, 0, 2.0]), "sequential"])
    assert secrets.leaks(f"got {np.array2string(data, precision=4)}", [])
    assert secrets.leaks(f"got {data.tolist()}", [])
    assert secrets.leaks(f"values {data[1]:.4g}, {data[2]:.4g}, {data[3]:.4g}", [])
    assert secrets.leaks("n=1234", []) and secrets.leaks("temperature 0.7", [])
    assert secrets.leaks("table [5, 2, 9]", []) and secrets.leaks("prompt 'a secret prompt'", [])
    assert secrets.leaks("capacity_factor 0.5", []) and secrets.leaks("values [0.0, 11.0, 0.0, 2.0]", [])
    assert secrets.leaks("it said: index out of range", ["index out of range"])
    for honest in ("shape (1000, 8), dtype float64", "largest error at index (5, 2, 9): relative error 0.12",
                   "1000 of 8000 elements differ (rtol=1e-05, atol=1e-08)", "block size 4096, 1000 rows",
                   "sequence 2 of 5 needs 9 blocks", "expected keys ['block_table', 'lengths']",
                   "differs (relative error 0.5)", "shared array (line 9)[0] at line 11 (`local[b] = 0`)",
                   "'sequential' keeps one running sum"):
        assert not secrets.leaks(honest, []), honest
