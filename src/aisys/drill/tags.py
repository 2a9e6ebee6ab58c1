"""How drills and cards are tagged: one vocabulary for both, so `aisys drill list` filters them together."""

TOPICS = ("architecture", "number formats", "gpu programming", "memory access", "reductions", "sorting",
          "normalization", "attention", "matmul", "tensor cores", "vision", "collectives", "inference", "decoding",
          "quantization", "parallel training", "autograd and compilers")
DIFFICULTIES = ("easy", "medium", "hard")
FREQUENCIES = ("high", "medium", "low")  # how often interviews ask it
LANGUAGES = ("numpy", "torch", "simt", "triton", "cuda")  # what a coding drill's attempt is written in
DRILL_MINUTES = {"easy": 15, "medium": 25, "hard": 40}  # a coding drill's time budget, by its difficulty
CARD_MINUTES = {"easy": 2, "medium": 4, "hard": 6}  # a concept card's
