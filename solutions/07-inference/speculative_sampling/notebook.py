# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Exercise: speculative sampling
#
# **You will learn** the rule that lets a small draft model write most of a large model's
# text without changing it: how a target model, in one forward pass, accepts or rejects $k$
# tokens a draft proposed so that every token it lets through follows the **target's**
# distribution exactly; why a rejected draft must be replaced by a sample of the residual
# $\max(0, p - q)$ and not of $p$; where the extra "bonus" token comes from; and how many
# tokens one pass of the target yields on average.
#
# Decoding one token of Llama-3-70B reads all 141 GB of its bf16 weights (spread over two or
# more H100s) to do 2 FLOPs per weight: the step is memory-bound, and scoring $k + 1$ tokens in
# one pass costs about what scoring one does (41.6 ms per H100's worth of bandwidth either way,
# for any k up to several dozen). Speculative decoding
# (Leviathan, Kalman & Matias, ICML 2023; Chen et al., DeepMind 2023) spends that slack: a
# cheap draft model proposes $k$ tokens $x_1 \dots x_k$, drawn from its distributions
# $q_1 \dots q_k$; one pass of the target gives its distributions $p_1 \dots p_{k+1}$ at the
# same positions (and one after them); then, for $i = 1, 2, \dots$
#
# * keep $x_i$ with probability $\min\left(1, \dfrac{p_i(x_i)}{q_i(x_i)}\right)$;
# * at the first rejection, draw the target's own token from the **residual**
#   $r_i(x) = \dfrac{\max(0,\ p_i(x) - q_i(x))}{\sum_y \max(0,\ p_i(y) - q_i(y))}$, and stop;
# * if all $k$ drafts were kept, draw a **bonus** token from $p_{k+1}$, which the pass
#   computed anyway.
#
# So one pass yields between 1 and $k + 1$ tokens, and (this is the point) each of them
# follows the target's distribution exactly, whatever the draft is: a bad draft costs speed,
# never quality. You will check that statistically: the grader runs your `verify` thousands
# of times and compares the counts of each token with the target's probabilities with a
# chi-square test. A correct `verify` fails such a test once in $10^7$ runs; a wrong one
# fails it every time. Everything here uses numpy only; when grading, `aisys` cannot be
# imported.

# %%
import numpy as np
from aisys_grader import checker

check = checker("07-inference/speculative_sampling", globals())

# A target p and a draft q over a vocabulary of 5 tokens, used in the examples below.
p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
q = np.array([0.10, 0.15, 0.20, 0.25, 0.30])

# %% [markdown]
# ## 1. The acceptance rate
#
# A draft token $x \sim q$ is kept with probability $\min(1, p(x)/q(x))$, so the probability
# that a draft is kept is
#
# $$\alpha = \sum_x q(x) \min\left(1, \frac{p(x)}{q(x)}\right) = \sum_x \min(p(x), q(x)),$$
#
# which is $1$ minus the total variation distance $\frac12 \sum_x |p(x) - q(x)|$ between the
# two distributions: 1 when the draft is perfect, 0 when they share no token. Write it for two
# probability vectors of the same length.

# %% tags=["solution"]
def acceptance_rate(target_probs, draft_probs) -> float:
    """alpha = sum_x min(p(x), q(x)): the probability that a draft token drawn from q is kept."""
    ### BEGIN SOLUTION
    return float(np.minimum(target_probs, draft_probs).sum())
    ### END SOLUTION


print(f"alpha = {acceptance_rate(p, q):.2f}")  # 0.60

# %% tags=["check"]
check("acceptance_rate")
### BEGIN HIDDEN TESTS
check("acceptance_rate", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 2. Verify the drafts
#
# Write `verify(draft_tokens, draft_probs, target_probs, rng)`:
#
# * `draft_tokens`: the $k$ proposed token ids (a list; $k = 0$ is allowed, and then the pass
#   yields just the bonus token);
# * `draft_probs`, shape $(k, V)$: row $i$ is the distribution $q_i$ draft token $i$ was drawn from
#   (every draft token has $q_i(x_i) > 0$);
# * `target_probs`, shape $(k + 1, V)$: row $i$ is the target's $p_i$ at the same position, row
#   $k$ its distribution for the token after the last draft;
# * `rng`: a `numpy.random.Generator`; take all randomness from it (`rng.random()` for a
#   uniform in $[0, 1)$, `rng.choice(V, p=weights)` to draw a token), so that a seed
#   reproduces a run.
#
# Return the list of tokens the pass yields: the drafts kept, in order, then one token of the
# target's (the replacement of the first rejected draft, or the bonus). Everything after the
# first rejection is thrown away: those drafts were conditioned on a token that is not in the
# text any more. Two edge cases need no special code if you write the rule as it stands: a
# draft with $p(x) \geq q(x)$ is always kept, and one with $p(x) = 0$ never is.

# %% tags=["solution"]
def verify(draft_tokens, draft_probs, target_probs, rng) -> list:
    """The tokens one target pass yields: the kept prefix of the drafts, then one token drawn from the target."""
    ### BEGIN SOLUTION
    p, q = np.asarray(target_probs, dtype=float), np.asarray(draft_probs, dtype=float)
    accepted = []
    for i, x in enumerate(draft_tokens):
        if rng.random() < min(1.0, p[i, x] / q[i, x]):
            accepted.append(int(x))
            continue
        residual = np.maximum(p[i] - q[i], 0.0)  # never all zero after a rejection: rejection needs p(x) < q(x)
        accepted.append(int(rng.choice(len(residual), p=residual / residual.sum())))
        return accepted
    bonus = p[len(draft_tokens)]
    accepted.append(int(rng.choice(len(bonus), p=bonus / bonus.sum())))
    return accepted
    ### END SOLUTION


# %% [markdown]
# The checks run your `verify` many times through this driver (provided; do not change it):
# it calls `verify` once per row of drafts with one generator, and returns every output padded
# with $-1$ to $k + 1$ tokens.

# %%
def verify_many(draft_tokens, draft_probs, target_probs, seed):
    """verify on each row of draft_tokens (trials, k); the outputs, padded with -1, as a (trials, k + 1) array."""
    rng = np.random.default_rng(seed)
    trials, k = np.shape(draft_tokens)
    outputs = np.full((trials, k + 1), -1, dtype=np.int64)
    for t in range(trials):
        tokens = verify([int(x) for x in draft_tokens[t]], draft_probs, target_probs, rng)
        if not 1 <= len(tokens) <= k + 1:
            raise ValueError(f"verify returned {len(tokens)} tokens for k = {k} drafts; it must return 1 to k + 1")
        outputs[t, :len(tokens)] = tokens
    return outputs


# Drafts drawn from q at every position, judged against p: count the first tokens that come out.
rng = np.random.default_rng(0)
k, trials = 3, 10_000
drafts = rng.choice(len(q), size=(trials, k), p=q)
outputs = verify_many(drafts, np.tile(q, (k, 1)), np.tile(p, (k + 1, 1)), seed=1)
print("target p            ", p)
print("draft q             ", q)
print("first token, counted", np.round(np.bincount(outputs[:, 0], minlength=len(p)) / trials, 3))

# %% [markdown]
# The first token that comes out must follow $p_1$, wherever it came from (a kept draft or a
# replacement).

# %% tags=["check"]
check("first_token")
### BEGIN HIDDEN TESTS
check("first_token", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Draft $i$ is judged only if drafts $1 \dots i-1$ were all kept, so a pass yields $j$ tokens
# with probability $\alpha_1 \cdots \alpha_{j-1} (1 - \alpha_j)$ for $j \leq k$, and $k + 1$
# tokens with probability $\alpha_1 \cdots \alpha_k$.

# %% tags=["check"]
check("accepted_count")
### BEGIN HIDDEN TESTS
check("accepted_count", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Among the passes that reach position $j$, the token there must follow $p_j$, the bonus
# token at position $k + 1$ included. Here each position has its own $p_j$ and $q_j$.

# %% tags=["check"]
check("later_positions")
### BEGIN HIDDEN TESTS
check("later_positions", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 3. Whole texts
#
# In a real model the target's distribution at a position depends on the tokens before it,
# and the draft proposes each token after its own earlier drafts. The smallest model with that
# property is a **bigram** model: row $c$ of a $(V, V)$ table is the distribution of the next
# token after token $c$. `sample_text` (provided) generates texts with your `verify`, calling it
# as many times as the text needs; the joint distribution of the tokens must be the target
# table's, $P(x_1 x_2 x_3) = p(x_1 \mid 0)\, p(x_2 \mid x_1)\, p(x_3 \mid x_2)$, even for tokens that
# different passes produced.

# %%
def sample_text(target_table, draft_table, n, k, trials, seed):
    """`trials` texts of n tokens after token 0, generated with k drafts per verify: a (trials, n) array."""
    rng = np.random.default_rng(seed)
    vocabulary = len(target_table)
    texts = np.zeros((trials, n), dtype=np.int64)
    for t in range(trials):
        text = [0]
        while len(text) <= n:
            drafts = []
            for _ in range(k):  # the draft proposes each token after the ones before it
                drafts.append(int(rng.choice(vocabulary, p=draft_table[(text + drafts)[-1]])))
            contexts = [text[-1]] + drafts  # the token each draft follows, and the one the bonus follows
            text += verify(drafts, draft_table[contexts[:-1]], target_table[contexts], rng)
        texts[t] = text[1:n + 1]
    return texts


target_table = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.3, 0.4, 0.3]])
draft_table = np.array([[0.2, 0.3, 0.5], [0.5, 0.4, 0.1], [0.3, 0.3, 0.4]])
texts = sample_text(target_table, draft_table, n=3, k=2, trials=2000, seed=2)
print("P(x1 = 0, x2 = 0) counted:", np.mean((texts[:, 0] == 0) & (texts[:, 1] == 0)), " exact:", 0.6 * 0.6)

# %% tags=["check"]
check("generated_text")
### BEGIN HIDDEN TESTS
check("generated_text", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# ## 4. Tokens per pass of the target
#
# When every draft is kept with the same probability $\alpha$, independently, a pass yields
# its $j$-th token only if the $j - 1$ drafts before it were kept, and it always yields one
# token of its own. The expected number of tokens per pass is then
#
# $$E[\text{tokens}] = 1 + \alpha + \alpha^2 + \dots + \alpha^k = \frac{1 - \alpha^{k+1}}{1 - \alpha}$$
#
# (Leviathan et al., eq. 1). Write it; $k = 0$ gives 1 (plain decoding), and $\alpha = 1$ gives
# $k + 1$, where the closed form is $0 / 0$.

# %% tags=["solution"]
def expected_accepted(alpha: float, k: int) -> float:
    """Expected tokens one pass of the target yields with k drafts, each kept with probability alpha."""
    ### BEGIN SOLUTION
    return float(sum(alpha**i for i in range(k + 1)))
    ### END SOLUTION


# %% tags=["check"]
check("expected_accepted")
### BEGIN HIDDEN TESTS
check("expected_accepted", hidden=True)
### END HIDDEN TESTS

# %% [markdown]
# Compare the formula with your simulation, and see what the tokens cost. One round costs $k$
# steps of the draft and one pass of the target; if a draft step costs $c$ target steps, the
# speed-up over plain decoding is $E[\text{tokens}] / (kc + 1)$ (Leviathan et al., Theorem 3.8).
# More drafts pay off only while they are likely to be kept: find the best $k$ for each $\alpha$.

# %%
alpha = acceptance_rate(p, q)
for k in range(6):
    drafts = rng.choice(len(q), size=(3000, k), p=q)
    outputs = verify_many(drafts, np.tile(q, (k, 1)), np.tile(p, (k + 1, 1)), seed=k)
    simulated = (outputs >= 0).sum(axis=1).mean()
    print(f"k = {k}: {simulated:.3f} tokens per pass simulated, {expected_accepted(alpha, k):.3f} expected")

c = 0.1  # a draft ten times cheaper than the target
for alpha in (0.5, 0.7, 0.9):
    speedups = [expected_accepted(alpha, k) / (k * c + 1) for k in range(11)]
    print(f"alpha = {alpha}: best k = {int(np.argmax(speedups))}, speed-up {max(speedups):.2f}x")
