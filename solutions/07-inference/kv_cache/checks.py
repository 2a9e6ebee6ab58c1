"""Checks: the cache-size calculator, and an incremental decoder graded against recomputation.

The calculator's functions are plain arithmetic on a model's shape (a dict of plain values, the
fields of `ModelConfig`), compared with the reference on real shapes (Llama 2 and 3: multi-head
and grouped-query attention) and, hidden, on random ones with every cache dtype, multi-query
attention (one kv head), zero tokens, and budgets that hold an exact number of sequences, one
byte less, or not even the weights.

The cache is graded through the provided `run_cache(config, dtype, appends)`: after each append, the
keys and values returned (all the layer holds, in the model's dtype), the length (the least over the
layers), and whether they are views of the memory the layer's first append returned (a cache grown by
np.concatenate is not). The decoder checks name a wrong KVCache first, max_sequences a wrong
kv_cache_bytes: the functions build on them.

The decoder is graded through the notebook's provided driver `run_decoder(tokens, prompt_len,
seed, dtype)`: it builds the tiny model with that seed in the student's kernel, runs the student's
`prefill` on the prompt and `decode_step` on each later token (the given tokens, so no sampling
is involved), and returns every logit together with what the model saw: how many tokens each
call to `qkv` carried, and how many times `forward` ran. Here the same model is built from the
same seed, and the logits are compared with `model.forward` over the whole sequence. An
incremental decoder does not reproduce recomputation bit for bit (a one-row and a T-row matrix
product sum in different orders), so float32 is compared to 1e-4 and float64 to 1e-9: the
mistakes this catches change logits by O(1). The counts show whether the cache is used: a
prefill runs the whole prompt through each layer in one call, and a decode step runs one token,
never the sequence again.

Hidden cases: several seeds, prompt lengths 1, 2, odd and ~200, one decode step or many, both
dtypes, and a sequence that fills the model's whole context (1024 tokens).
"""

from dataclasses import asdict

import numpy as np

import aisys.inference.kv_cache as kv_cache  # the answer key: kept out of the grading kernel
from aisys.inference import model

from aisys_grader.checks import check, compare_cases
from aisys_grader.compare import CheckFailure, assert_close, assert_format, describe, shown, unredacted


DTYPES = ("fp32", "fp16", "bf16", "fp8_e4m3")
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}
H100_BYTES = 80e9


def _config(config: model.ModelConfig) -> dict:
    return asdict(config)


def _random_config(rng) -> model.ModelConfig:
    head_dim = int(rng.choice([64, 80, 128, 256]))
    n_kv_heads = int(rng.choice([1, 2, 4, 8, 16]))
    n_heads = n_kv_heads * int(rng.choice([1, 2, 4, 8]))
    return model.ModelConfig(f"random-{n_heads}h-{n_kv_heads}kv", vocab_size=int(rng.integers(1000, 200_000)),
                             d_model=n_heads * head_dim, n_layers=int(rng.integers(1, 128)), n_heads=n_heads,
                             n_kv_heads=n_kv_heads, d_ff=int(rng.integers(1000, 50_000)),
                             max_seq_len=int(rng.choice([2048, 4096, 8192, 131_072])))


# ----------------------------------------------------------------------------------------- calculator

def _reference_bytes(config, tokens, batch, dtype):
    return kv_cache.kv_cache_bytes(model.ModelConfig(**config), tokens, batch, dtype)


def _bytes_hint(case: dict, got, expected) -> str:
    """Which factor a wrong size most likely left out, from what typical mistakes give."""
    config = model.ModelConfig(**case["config"])
    if not isinstance(got, (int, float)) or expected == 0:
        return ""
    mistakes = {expected / 2: "Half the expected size: the cache holds two tensors per layer, K and V",
                expected * config.n_heads / config.n_kv_heads:
                    "Counted n_heads heads: with grouped-query attention only n_kv_heads key/value heads are cached",
                expected / config.n_layers: "One layer's worth: every layer caches its own keys and values"}
    mistakes.pop(expected, None)
    return "; ".join(why for value, why in mistakes.items() if np.isclose(got, value, rtol=1e-9))


@check(points=2)
def kv_cache_bytes(student, rng, hidden):
    """kv_cache_bytes(config, tokens, batch, dtype): K and V, every layer, n_kv_heads x head size per token."""
    cases = [{"config": _config(model.LLAMA_2_7B), "tokens": 4096, "batch": 1, "dtype": "fp16"},
             {"config": _config(model.LLAMA_3_8B), "tokens": 8192, "batch": 16, "dtype": "bf16"}]
    if hidden:
        cases = [{"config": _config(model.LLAMA_2_70B), "tokens": 32_768, "batch": 3, "dtype": "fp8_e4m3"},
                 {"config": _config(model.TINY), "tokens": 1, "batch": 1, "dtype": "fp32"},
                 {"config": _config(model.LLAMA_3_70B), "tokens": 0, "batch": 8, "dtype": "bf16"}]
        cases += [{"config": _config(_random_config(rng)), "tokens": int(10 ** rng.uniform(0, 5.2)),
                   "batch": int(rng.integers(1, 257)), "dtype": str(rng.choice(DTYPES))} for _ in range(8)]
        cases.append({"config": _config(model.ModelConfig("MQA", 32_000, 4096, 32, 32, 1, 11_008, 4096)),
                      "tokens": 2048, "batch": 4, "dtype": "fp16"})
    compare_cases(student, "kv_cache_bytes", cases, _reference_bytes, returns="number", hidden=hidden,
                  hint=_bytes_hint)


def _reference_sequences(config, memory_bytes, weights_bytes, context, dtype):
    return kv_cache.max_sequences(model.ModelConfig(**config), memory_bytes, weights_bytes, context, dtype)


def _sequences_hint(case: dict, got, expected) -> str:
    config = model.ModelConfig(**case["config"])
    per_sequence = kv_cache.kv_cache_bytes(config, case["context"], 1, case["dtype"])
    free = case["memory_bytes"] - case["weights_bytes"]
    if got == case["memory_bytes"] // per_sequence and free < case["memory_bytes"]:
        return "The weights take their share of memory first: only memory - weights holds caches"
    if free < 0 and isinstance(got, int) and got < 0:
        return "When the weights alone do not fit, no sequence does: 0, not a negative count"
    if free >= 0 and got == -(-free // per_sequence):
        return "A sequence whose cache fits only in part does not fit: round down"
    return ""


def _bytes_helper_problem(student, case: dict) -> str:
    """max_sequences builds on kv_cache_bytes: what is wrong with the student's on this case's model, or ""."""
    per_sequence = {"config": case["config"], "tokens": case["context"], "batch": 1, "dtype": case["dtype"]}
    try:
        got = student.call("kv_cache_bytes", returns="number", **per_sequence)
    except CheckFailure:
        return "Your kv_cache_bytes fails on this case's model (see its check), and max_sequences builds on it"
    if np.isclose(got, _reference_bytes(**per_sequence), rtol=1e-9):
        return ""
    return ("Your kv_cache_bytes gives the wrong size of one sequence's cache on this model"
            + unredacted(f" ({got:.6g} bytes, not {_reference_bytes(**per_sequence):.6g})")
            + ": max_sequences builds on it, so fix kv_cache_bytes first (see its check)")


@check(points=1)
def max_sequences(student, rng, hidden):
    """max_sequences(...) counts the whole sequences whose caches fit next to the weights."""
    weights = {name: model.MODELS[name].parameter_count() * 2 for name in model.MODELS}  # bf16 weights
    cases = [{"config": _config(model.LLAMA_3_8B), "memory_bytes": H100_BYTES, "weights_bytes": weights["Llama-3-8B"],
              "context": 8192, "dtype": "bf16"},
             {"config": _config(model.LLAMA_2_13B), "memory_bytes": H100_BYTES,
              "weights_bytes": weights["Llama-2-13B"], "context": 4096, "dtype": "fp16"}]
    if hidden:
        exact = kv_cache.kv_cache_bytes(model.LLAMA_2_7B, 1000, 1, "fp16")
        cases = [
            {"config": _config(model.LLAMA_2_7B), "memory_bytes": 5 * exact + 1e9, "weights_bytes": 1e9,
             "context": 1000, "dtype": "fp16"},  # exactly five fit
            {"config": _config(model.LLAMA_2_7B), "memory_bytes": 5 * exact + 1e9 - 1, "weights_bytes": 1e9,
             "context": 1000, "dtype": "fp16"},  # one byte short of five
            {"config": _config(model.LLAMA_2_7B), "memory_bytes": 4.7 * exact + 1e9, "weights_bytes": 1e9,
             "context": 1000, "dtype": "fp16"},  # 4.7 of them: four
            {"config": _config(model.LLAMA_3_70B), "memory_bytes": H100_BYTES,
             "weights_bytes": weights["Llama-3-70B"], "context": 8192, "dtype": "bf16"},  # 141 GB of weights
            {"config": _config(model.LLAMA_3_70B), "memory_bytes": 141e9 * 8, "weights_bytes": weights["Llama-3-70B"],
             "context": 1, "dtype": "fp8_e4m3"},
        ]
        for _ in range(6):
            config = _random_config(rng)
            cases.append({"config": _config(config), "memory_bytes": float(rng.choice([24e9, 40e9, 80e9, 141e9])),
                          "weights_bytes": float(rng.uniform(0, 30e9)), "context": int(10 ** rng.uniform(0, 5)),
                          "dtype": str(rng.choice(DTYPES))})
    def hint(case, got, expected):  # a wrong kv_cache_bytes is named first: max_sequences builds on it
        return _bytes_helper_problem(student, case) or _sequences_hint(case, got, expected)

    compare_cases(student, "max_sequences", cases, _reference_sequences, returns="integer", hidden=hidden, hint=hint)


# ----------------------------------------------------------------------------------------- the cache

SMALL = model.ModelConfig("small", vocab_size=16, d_model=8, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=16,
                          max_seq_len=12)  # head_dim 2
ONE_LAYER = model.ModelConfig("one layer", vocab_size=16, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=16,
                              max_seq_len=6)


def _appends(rng, config: model.ModelConfig, dtype: str, plan: list[tuple[int, int]]) -> list:
    """[layer, k, v] for each (layer, tokens) of the plan, distinct values drawn from rng."""
    shape = (config.n_kv_heads, config.head_dim)
    return [[layer, rng.standard_normal((n, *shape)).astype(dtype), rng.standard_normal((n, *shape)).astype(dtype)]
            for layer, n in plan]


def _cache_cases(rng, hidden: bool) -> list[tuple]:
    """(config, dtype, appends): layers filled unevenly (length is the least), prompts and single tokens."""
    cases = [(SMALL, "float32", _appends(rng, SMALL, "float32", [(0, 3), (1, 3), (2, 3), (0, 1), (1, 1), (2, 1),
                                                                  (0, 2)]))]
    if hidden:
        cases = [(SMALL, "float64", _appends(rng, SMALL, "float64", [(0, 5), (2, 5), (1, 5), (1, 1), (0, 1), (2, 1),
                                                                      (2, 6), (0, 6), (1, 6)])),  # to max_seq_len
                 (ONE_LAYER, "float32", _appends(rng, ONE_LAYER, "float32", [(0, 1)] * 6))]
    return cases


def _cache_problem(got: list, config: model.ModelConfig, dtype: str, appends: list) -> str | None:
    """What is wrong with run_cache's report against a reference cache on the same appends, or None."""
    cache = kv_cache.KVCache(config, dtype)
    if not isinstance(got, list) or len(got) != len(appends) or not all(
            isinstance(g, dict) and set(g) == {"keys", "values", "length", "in_place"} for g in got):
        return "run_cache must return one report per append, as the provided one does: run its cell again as it was"
    for i, ((layer, k, v), step) in enumerate(zip(appends, got), 1):
        keys, values = (np.array(x) for x in cache.append(layer, k, v))
        where = f"append {i} of {len(appends)} (layer {layer}, {len(k)} new token{'s' * (len(k) != 1)})"
        if any(isinstance(x, np.ndarray) and x.shape == k.shape and x.shape != keys.shape
               for x in (step["keys"], step["values"])):
            return (f"{where} returned the new tokens' keys and values only: return all that the layer holds so far, "
                    "the new ones included (a token attends to itself and to every token before it)")
        for name, mine, theirs in (("keys", step["keys"], keys), ("values", step["values"], values)):
            try:
                assert_format(mine, dtype, where=name)
            except CheckFailure as failure:
                return (f"{where}: {failure}: the cache holds the model's dtype; allocate it with np.zeros(shape, "
                        "dtype)")
            try:
                assert_close(mine, theirs, rtol=0, atol=0, where=name)
            except CheckFailure as failure:
                return (f"{where}: {failure}: each layer keeps its tokens in the order appended, the new ones after "
                        "those it holds")
        if step["length"] != cache.length:
            return (f"{where}: length is {shown(step['length'], '!r')}, expected {cache.length}: the tokens every "
                    "layer holds (the least over the layers), the position the next token takes")
        if not step["in_place"]:
            return (f"{where} returned arrays that are not views of the memory its first append returned: the cache "
                    "copies itself as it grows (np.concatenate), O(T^2) bytes over a generation of T tokens; allocate "
                    "(n_layers, max_seq_len, n_kv_heads, head_dim) once, write the new tokens into it and return views "
                    "(self.keys[layer, :end])")
    return None


def _run_cache(student, config: model.ModelConfig, dtype: str, appends: list) -> str | None:
    return _cache_problem(student.call("run_cache", asdict(config), dtype, appends, returns="list"), config, dtype,
                          appends)


@check(points=2)
def kv_cache_append(student, rng, hidden):
    """KVCache.append writes into memory reserved once and returns the layer's keys and values so far; length is the
    least a layer holds."""
    cases = _cache_cases(rng, hidden)
    for i, (config, dtype, appends) in enumerate(cases, 1):
        problem = _run_cache(student, config, dtype, appends)
        if problem:
            label = f"{'hidden case' if hidden else 'case'} {i} of {len(cases)} ({dtype}, {config.n_layers} layers)"
            raise CheckFailure(f"{label}: {problem}")


def _blame_the_cache(student, failure: CheckFailure, function: str) -> CheckFailure:
    """A decoder check's failure, naming KVCache first when it is what is wrong: the decoder builds on it."""
    if "not implemented yet" in str(failure):
        return failure
    try:
        problem = _run_cache(student, *_cache_cases(np.random.default_rng(0), False)[0])
    except CheckFailure as error:
        problem = str(error)
    if problem is None:
        return failure
    return CheckFailure(f"Your KVCache is wrong (see the check kv_cache_append), and {function} builds on it: "
                        f"{problem}. What {function} gave: {failure}")


# ----------------------------------------------------------------------------------------- the decoder

def _decoder_cases(rng, hidden: bool, *, decode: bool) -> list[tuple[list[int], int, int, str]]:
    """(tokens, prompt_len, seed, dtype) cases; without `decode`, the whole sequence is the prompt."""
    if not hidden:
        shapes = [(6, 4, 0, "float32"), (11, 3, 1, "float64")]  # (prompt_len, new tokens, seed, dtype)
    else:
        seeds = [int(s) for s in rng.integers(2, 10_000, size=7)]
        shapes = [(1, 5, seeds[0], "float64"), (2, 1, seeds[1], "float32"),
                  (int(rng.integers(1, 25)) * 2 + 1, int(rng.integers(2, 17)), seeds[2], "float64"),
                  (int(rng.integers(190, 211)), int(rng.integers(2, 9)), seeds[3], "float32"),
                  (int(rng.integers(3, 60)), int(rng.integers(1, 20)), seeds[4], "float32"),
                  (1000, model.TINY.max_seq_len - 1000, seeds[5], "float64")]  # to the end of the context
    cases = []
    for prompt_len, new, seed, dtype in shapes:
        tokens = [int(t) for t in rng.integers(0, model.TINY.vocab_size, size=prompt_len + new)]
        cases.append((tokens, prompt_len + (0 if decode else new), seed, dtype))
    return cases


def _run(student, tokens: list[int], prompt_len: int, seed: int, dtype: str, label: str) -> dict:
    result = student.call("run_decoder", tokens, prompt_len, seed, dtype, returns="mapping")
    expected_keys = {"prefill", "decode", "qkv_tokens", "forward_calls"}
    if set(result) != expected_keys:
        keys = unredacted(f"keys {sorted(result)}", f"{len(result)} other keys")  # what the student's code returned
        raise CheckFailure(f"{label}: run_decoder returned {keys}, expected {sorted(expected_keys)}: "
                           "run_decoder is provided; run its cell again as it was")
    return result


def _label(hidden: bool, i: int, count: int, tokens, prompt_len: int, seed: int, dtype: str) -> str:
    return (f"{'hidden case' if hidden else 'case'} {i} of {count} (a prompt of {prompt_len} tokens, "
            f"{len(tokens) - prompt_len} decode steps{unredacted(f', seed {seed}')}, {dtype})")


def _logits(value, shape: tuple, what: str):
    array = np.asarray(value) if isinstance(value, np.ndarray) else None
    if array is None or array.shape != shape:
        raise CheckFailure(f"{what} must be an array of shape {shape}, got {describe(value)}")
    return array


PREFILL_HINT = ("A prefill gives the logits of every prompt position, as `model.forward` does: positions 0 .. T-1 "
                "after what the cache holds, causal attention (each token sees itself and the tokens before it) "
                "over the keys and values the cache returns, and every layer's keys and values stored.")
DECODE_HINT = ("In a decode step the new token sits at position `cache.length` (not 0): its query and key are "
               "rotated by that position; its own key and value join the cache before it attends (a token sees "
               "itself); and the cache holds keys and values, not queries.")


@check(points=2)
def prefill(student, rng, hidden):
    """prefill(model, cache, tokens) gives the logits of model.forward on the prompt."""
    try:
        _prefill(student, rng, hidden)
    except CheckFailure as failure:
        raise _blame_the_cache(student, failure, "prefill") from None


def _prefill(student, rng, hidden):
    cases = _decoder_cases(rng, hidden, decode=False)
    for i, (tokens, prompt_len, seed, dtype) in enumerate(cases, 1):
        label = _label(hidden, i, len(cases), tokens, prompt_len, seed, dtype)
        result = _run(student, tokens, prompt_len, seed, dtype, label)
        expected = model.Transformer(seed=seed, dtype=dtype).forward(tokens)
        got = _logits(result["prefill"], expected.shape, f"{label}: prefill's logits")
        try:
            assert_close(got.astype(np.float64), expected.astype(np.float64), rtol=TOLERANCE[dtype],
                         atol=TOLERANCE[dtype], where="prefill's logits")
        except CheckFailure as failure:
            raise CheckFailure(f"{label}: {failure}. {PREFILL_HINT}") from None


@check(points=3)
def decode_step(student, rng, hidden):
    """Prefill, then decode_step token after token, gives the logits of model.forward on the whole sequence."""
    try:
        _decode_step(student, rng, hidden)
    except CheckFailure as failure:
        raise _blame_the_cache(student, failure, "decode_step") from None


def _decode_step(student, rng, hidden):
    cases = _decoder_cases(rng, hidden, decode=True)
    for i, (tokens, prompt_len, seed, dtype) in enumerate(cases, 1):
        label = _label(hidden, i, len(cases), tokens, prompt_len, seed, dtype)
        result = _run(student, tokens, prompt_len, seed, dtype, label)
        expected = model.Transformer(seed=seed, dtype=dtype).forward(tokens).astype(np.float64)
        steps = result["decode"]
        if not isinstance(steps, list) or len(steps) != len(tokens) - prompt_len:
            raise CheckFailure(f"{label}: expected the logits of {len(tokens) - prompt_len} decode steps, "
                               f"got {describe(steps)}")
        got = _logits(result["prefill"], (prompt_len, expected.shape[1]), f"{label}: prefill's logits")
        rows = [_logits(step, (expected.shape[1],), f"{label}: decode step {s}'s logits")
                for s, step in enumerate(steps)]
        all_logits = np.concatenate([got, np.array(rows).reshape(-1, expected.shape[1])]).astype(np.float64)
        bad = ~np.isclose(all_logits, expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype]).all(axis=1)
        if not bad.any():
            continue
        position = int(np.argmax(bad))
        where = (f"the prefill's logits at position {position}" if position < prompt_len else
                 f"decode step {position - prompt_len} (the token at position {position}, after {position} cached)")
        try:
            assert_close(all_logits[position], expected[position], rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                         where=where)
        except CheckFailure as failure:
            hint = PREFILL_HINT if position < prompt_len else DECODE_HINT
            raise CheckFailure(f"{label}: {failure}; model.forward on the whole sequence gives those logits. "
                               f"{hint}") from None


@check(points=2)
def uses_the_cache(student, rng, hidden):
    """Prefill runs the prompt through each layer in one pass; a decode step runs one token, never the sequence
    again."""
    cases = _decoder_cases(rng, hidden, decode=True)
    cases = cases[:1] if not hidden else cases[:5]  # the counts do not depend on the values: a few cases suffice
    layers = model.TINY.n_layers
    for i, (tokens, prompt_len, seed, dtype) in enumerate(cases, 1):
        label = _label(hidden, i, len(cases), tokens, prompt_len, seed, dtype)
        result = _run(student, tokens, prompt_len, seed, dtype, label)
        counts, forwards = result["qkv_tokens"], result["forward_calls"]
        if forwards:
            raise CheckFailure(f"{label}: model.forward ran{unredacted(f' {forwards} times')}. It recomputes the whole "
                               "sequence, which is what a KV cache exists to avoid: run the layers yourself, on the "
                               "new tokens only, with the keys and values of the earlier ones from the cache.")
        prefill_counts = counts["prefill"]
        if prefill_counts != [prompt_len] * layers:
            saw = unredacted(f"{prefill_counts} tokens per call; expected {[prompt_len] * layers}",  # the student's
                             f"other numbers of tokens per call; expected {layers} calls of {prompt_len}")  # counts
            raise CheckFailure(f"{label}: during prefill, model.qkv saw {saw}: the whole prompt through each of "
                               f"the {layers} layers in one call, one matrix multiplication over all its tokens "
                               "(the compute-bound phase). Prefilling token by token gives the same logits at the "
                               "speed of decoding.")
        for step, step_counts in enumerate(counts["decode"]):
            if step_counts != [1] * layers:
                raise CheckFailure(
                    f"{label}: in decode step {step} (position {prompt_len + step}), model.qkv saw "
                    + unredacted(f"{step_counts} tokens per call; expected {[1] * layers}",
                                 f"other numbers of tokens per call; expected {layers} calls of 1 token")
                    + ": one new token per layer. The keys and values of the earlier tokens come from the cache; "
                    "recomputing them makes every step cost as much as a prefill of the whole sequence.")
