# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: beam search
#
# **You will learn** to write beam search, the decoding that keeps the `B` best partial sequences at
# every step instead of only the best one (greedy), and to get its bookkeeping right: scores as sums of
# log-probabilities, finished hypotheses set aside, and a stated rule for ties. The "model" here is plain
# data, a table of next-token log-probabilities given the last token, so that every answer is exact.
#
# **The conventions, all of them:**
# - `beam_search(log_probs0, log_probs, beam_width, max_len, eos)`: `log_probs0` (float64, shape `(V,)`)
#   scores the first token; `log_probs` (float64, `(V, V)`) scores token `b` right after token `a` as
#   `log_probs[a, b]`; all entries finite (rows need not be normalised: the checks use numbers <= 0);
#   `beam_width >= 1`, `max_len >= 1` (the most tokens a sequence may have, `eos` included), `eos` a token id;
# - a hypothesis is a tuple of tokens; its **score** is the sum of its tokens' log-probs, added left to
#   right in float64 (`score(seq + (t,)) = score(seq) + log_probs[seq[-1], t]`); no length penalty;
# - hypotheses **rank** by score, higher first; equal scores by their tokens as Python compares tuples,
#   **smaller first** (so `(0, 2)` before `(2,)`, and `(1,)` before `(1, 0)`);
# - step 1: the candidates are the `V` one-token sequences. Every step: keep the best `beam_width`
#   candidates (all of them if there are fewer); those ending in `eos` are **finished**: set aside and
#   never extended (the beam narrows); the others are extended by every token to make the next step's
#   `len(live) * V` candidates;
# - stop when no unfinished hypothesis is left, or when the hypotheses have `max_len` tokens; the answer is
#   the best (by the ranking above) of the finished hypotheses and the unfinished ones left at the end;
# - return the tuple `(tokens, score)`: `tokens` an int64 numpy array (ending in `eos` if the answer is
#   finished), `score` a float; tokens are compared exactly, the score with a relative tolerance of 1e-9
#   (scores can be below -1000: keep them as sums of logs).

# %%
import numpy as np

from aisys_grader import checker

check = checker("09-drills/beam_search", globals())

# %% tags=["solution"]
def beam_search(log_probs0, log_probs, beam_width, max_len, eos):
    """The best sequence (int64 array) and its score (sum of log-probs) found by beam search."""
    ### BEGIN SOLUTION
    vocab = len(log_probs0)

    def best(hypotheses, n):  # higher score first, then the smaller tuple of tokens
        return sorted(hypotheses, key=lambda h: (-h[1], h[0]))[:n]

    candidates = [((t,), float(log_probs0[t])) for t in range(vocab)]
    finished = []
    for length in range(1, max_len + 1):
        top = best(candidates, beam_width)
        finished += [h for h in top if h[0][-1] == eos]
        live = [h for h in top if h[0][-1] != eos]  # a finished hypothesis is never extended
        if not live or length == max_len:
            break
        candidates = [(tokens + (t,), score + float(log_probs[tokens[-1], t]))
                      for tokens, score in live for t in range(vocab)]
    tokens, score = best(finished + live, 1)[0]
    return np.array(tokens, dtype=np.int64), score
    ### END SOLUTION


# %% tags=["check"]
check("beam_search")
### BEGIN HIDDEN TESTS
check("beam_search", hidden=True)
### END HIDDEN TESTS
