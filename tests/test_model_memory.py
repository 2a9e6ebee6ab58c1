"""aisys.model_memory: parameter counts against torch models on the meta device (aisys.meta_model), activations
against saved-tensor bytes measured on a small layer (aisys.parallel.toy_transformer), published counts recomputed
from published configs, and the KV cache against aisys.inference.kv_cache."""

import pytest

from aisys import meta_model
from aisys import model_memory as mm
from aisys.inference import kv_cache
from aisys.inference.model import LLAMA_2_7B, LLAMA_2_70B, LLAMA_3_8B
from aisys.parallel import planner, toy_transformer

LLAMA_2_7B_CFG, LLAMA_2_70B_CFG, GPT3_CFG = mm.LLAMA_2_7B, mm.LLAMA_2_70B, mm.GPT3_175B
MIXTRAL_CFG, DEEPSEEK_V2_CFG, MISTRAL_7B_CFG = mm.MIXTRAL_8X7B, mm.DEEPSEEK_V2, mm.MISTRAL_7B

SMALL = [
    mm.config(layers=3, hidden=64, heads=8, kv_heads=2, ffn=176, vocab=101),  # GQA, SwiGLU
    mm.config(layers=2, hidden=48, heads=4, ffn=192, vocab=77, tied=True, gated=False, bias=True, norm="layernorm",
              positions=32),  # GPT-2-like
    mm.config(layers=2, hidden=64, heads=4, head_dim=24, kv_heads=1, ffn=96, vocab=50),  # MQA, head_dim != h / a
    mm.config(layers=4, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=40, experts=6, top_k=2, shared_experts=1,
              expert_ffn=24, dense_layers=1, tied=True),  # MoE, shared experts, a dense first layer
    mm.config(layers=2, hidden=32, heads=4, ffn=64, vocab=40, experts=4, top_k=1, expert_ffn=16, gated=False,
              bias=True),  # plain MLP experts with biases
    mm.config(layers=2, hidden=64, heads=4, head_dim=16, ffn=128, vocab=60, kv_rank=32, q_rank=24, rope_dim=8),
    mm.config(layers=2, hidden=64, heads=4, head_dim=16, ffn=128, vocab=60, kv_rank=32, rope_dim=8, bias=True,
              norm="layernorm"),  # MLA without query compression
]


@pytest.mark.parametrize("model", SMALL + [LLAMA_2_70B_CFG, GPT3_CFG, MIXTRAL_CFG])
def test_parameters_match_a_torch_model_on_the_meta_device(model):
    assert mm.parameter_count(model) == meta_model.count(model)


def test_published_parameter_counts():
    # Llama 2 7B: 6,738,415,616 (the count of the released checkpoint; the paper's Table 1 rounds it to 7B).
    assert mm.parameter_count(LLAMA_2_7B_CFG)["total"] == 6_738_415_616 == LLAMA_2_7B.parameter_count()
    assert mm.parameter_count(LLAMA_2_70B_CFG)["total"] == LLAMA_2_70B.parameter_count()
    # GPT-3: Brown et al., Table 2.1, "175.0B"; our layout gives 174.6B (0.3% off: the table rounds its sizes).
    assert mm.parameter_count(GPT3_CFG)["total"] == pytest.approx(175.0e9, rel=0.005)
    # Mixtral: 46.7B total, 12.9B active (Mistral AI's release; "47B" and "13B" in the paper's abstract).
    counts = mm.parameter_count(MIXTRAL_CFG)
    assert counts["total"] == pytest.approx(46.7e9, rel=0.002) and counts["active"] == pytest.approx(12.9e9, rel=0.005)
    # DeepSeek-V2: 236B total, 21B activated per token (abstract).
    counts = mm.parameter_count(DEEPSEEK_V2_CFG)
    assert counts["total"] == pytest.approx(236e9, rel=0.005) and counts["active"] == pytest.approx(21e9, rel=0.025)
    # Mistral 7B: 7.24B (Mistral AI's release notes; not checked here).
    assert mm.parameter_count(MISTRAL_7B_CFG)["total"] == pytest.approx(7.24e9, rel=0.002)


def test_the_planner_counts_as_model_memory():
    model = {"layers": 4, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn": 176, "vocab": 101, "tied": True,
             "gated": True}
    assert planner.parameter_count(model) == mm.parameter_count(mm.from_planner(model))["total"] \
        == toy_transformer.meta_parameter_count(model)


@pytest.mark.parametrize("recompute", mm.RECOMPUTE)
@pytest.mark.parametrize("planner_model,batch,seq", [
    ({"layers": 1, "hidden": 64, "heads": 8, "kv_heads": 2, "ffn": 176, "vocab": 10, "tied": True, "gated": True},
     2, 32),
    ({"layers": 1, "hidden": 96, "heads": 4, "kv_heads": 4, "ffn": 384, "vocab": 10, "tied": False, "gated": False},
     1, 48)])
def test_activations_within_10_percent_of_saved_tensors(planner_model, batch, seq, recompute):
    # Conventions: the formula leaves out the norms' statistics (fp32 mean and rstd per token) and counts the
    # tensors Korthikanti et al. count; the measurement adds up the unique storages autograd saves (bf16, bool masks).
    predicted = mm.activation_bytes(mm.from_planner(planner_model), batch, seq, recompute)
    measured = toy_transformer.saved_activation_bytes(planner_model, batch, seq, recompute)
    assert abs(predicted - measured) <= 0.10 * measured


def test_activations_follow_korthikanti():
    model = mm.from_planner({"layers": 1, "hidden": 1024, "heads": 16, "kv_heads": 16, "ffn": 4096, "vocab": 10,
                             "tied": True, "gated": False})
    s, h, a = 2048, 1024, 16
    assert mm.activation_bytes_per_token(model, s) * s == s * h * (34 + 5 * a * s // h)  # sbh(34 + 5as/h), b = 1
    assert mm.activation_bytes_per_token(model, s, "full") == 2 * h
    assert mm.activation_bytes_per_token(model, s, flash=True) == 34 * h + 4 * a
    assert mm.activation_bytes_per_token(model, s, "selective") == 34 * h


def test_training_memory_is_16_bytes_per_parameter_plus_activations():
    n = mm.parameter_count(GPT3_CFG)["total"]
    memory = mm.training_memory(GPT3_CFG, 1, 2048, "full")
    assert (memory["weights"], memory["gradients"], memory["optimizer"]) == (2 * n, 2 * n, 12 * n)
    assert memory["activations"] == 96 * 2048 * 2 * 12288
    assert memory["total"] == 16 * n + memory["activations"]


def test_kv_cache():
    for ours, theirs in ((mm.config(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
                          LLAMA_3_8B), (LLAMA_2_7B_CFG, LLAMA_2_7B)):
        assert mm.kv_cache_bytes(ours, 3, 1000) == kv_cache.kv_cache_bytes(theirs, 1000, 3)
    assert mm.kv_elements_per_token(LLAMA_2_70B_CFG) == 2 * 8 * 128
    assert mm.kv_elements_per_token(DEEPSEEK_V2_CFG) == 512 + 64  # d_c + d_h^R (DeepSeek-V2, section 2.1.2)
    assert mm.kv_cache_bytes(MISTRAL_7B_CFG, 1, 32768) == mm.kv_cache_bytes(MISTRAL_7B_CFG, 1, 4096)
    assert mm.kv_cache_bytes(MISTRAL_7B_CFG, 1, 100) == 100 * 32 * 2 * 8 * 128 * 2
    memory = mm.inference_memory(LLAMA_2_7B_CFG, 2, 10, weight_bytes=0.5, kv_bytes=1)
    assert memory["weights"] == 6_738_415_616 / 2 and memory["kv_cache"] == 2 * 10 * 32 * 2 * 4096


@pytest.mark.parametrize("keys,named", [
    (dict(heads=8, kv_heads=3), "kv_heads"), (dict(experts=4, top_k=5, expert_ffn=8), "top_k"),
    (dict(norm="batchnorm"), "norm"), (dict(kv_rank=16, kv_heads=2), "kv_heads"), (dict(layers=0), "layers")])
def test_errors_name_the_key(keys, named):
    with pytest.raises(ValueError, match=named):
        mm.config(**{"layers": 2, "hidden": 64, "heads": 8, "ffn": 64, "vocab": 10, **keys})
