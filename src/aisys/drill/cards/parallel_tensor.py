"""Tensor parallelism (Megatron-LM): the all-reduces of a layer and their bytes, why the MLP splits columns then
rows, where f and g sit, the bias added once, and what sequence parallelism saves (aisys.parallel.tensor_parallel)."""

from aisys import prose

from ..card import Ask, Choice, Number, card

PAGE = "05-parallel-training/tensor-parallel"
GIB, MB = 2**30, 10**6
GPT3 = {"width": 12288, "layers": 96, "heads": 96, "seq": 2048}  # Brown et al. 2020, table 2.1


@card(topic="parallel training", difficulty="easy", frequency="high", page=PAGE)
def allreduces_per_layer_per_step():
    from aisys.parallel import tensor_parallel
    cost = tensor_parallel.allreduce_bytes_per_layer(1, 1, 2)
    per_step = 2 * cost["allreduces_per_pass"]
    return Ask(
        "A transformer layer (attention block + MLP block) runs Megatron-style tensor parallelism, without "
        "activation recomputation. How many all-reduces does each rank post for this layer in one training step "
        "(forward and backward)?",
        Number(per_step, rel=0.01, unit=""),
        f"Each block is f, its matrix multiplies, then g: g all-reduces the partial outputs forward, f all-reduces "
        f"the input's gradient backward. Two blocks, {cost['allreduces_per_pass']} all-reduces per pass, "
        f"{per_step} per step (recomputing the layer in the backward pass would add the forward's again).")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def tensor_parallel_bytes_per_layer():
    from aisys.parallel import tensor_parallel
    tokens, t = 4 * GPT3["seq"], 8
    cost = tensor_parallel.allreduce_bytes_per_layer(tokens, GPT3["width"], t, bytes_per_element=2)
    sent = cost["sent_per_rank_per_step"]
    return Ask(
        f"GPT-3 175B's width is {GPT3['width']:,}. A micro-batch of 4 sequences of {GPT3['seq']:,} tokens, bf16 "
        f"activations, tensor parallel over t = {t} GPUs with ring all-reduces: how many GiB does each GPU send for "
        "ONE layer in one training step (forward + backward)?",
        Number(sent / GIB, rel=0.03, unit="GiB"),
        f"Each all-reduce carries the activation, {tokens:,} x {GPT3['width']:,} x 2 bytes = "
        f"{prose.rate(cost['activation_bytes'], 'B')}; a ring sends 2(t-1)/t of it per rank; four all-reduces per "
        f"layer per step: 4 x 2 x {t - 1}/{t} x {cost['activation_bytes'] / GIB:.3f} GiB = {sent / GIB:.2f} GiB. "
        "It grows with tokens and width, not with the weights, and does not shrink as t grows.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def why_columns_then_rows():
    options = ("GeLU is nonlinear: split by columns, each rank holds complete columns of the hidden activation and "
               "applies GeLU with no communication; the row split of W2 then needs one all-reduce at the end",
               "a column split moves fewer weight bytes to each GPU than a row split",
               "cuBLAS is faster on tall matrices, so the first matrix is cut into columns",
               "the row split first would be just as good: GeLU(a + b) = GeLU(a) + GeLU(b)")
    return Ask(
        "Megatron splits the MLP's first matrix W1 by columns and the second, W2, by rows. Why this order?",
        Choice(options, 0),
        "A row split of W1 leaves each rank a partial sum of X W1, and GeLU of a partial sum is not the partial "
        "GeLU: an all-reduce would be needed before the nonlinearity. Columns first give whole columns, GeLU runs "
        "locally, and those columns are exactly the input a row split of W2 wants: one all-reduce per block.")


@card(topic="parallel training", difficulty="medium", frequency="high", page=PAGE)
def where_f_and_g_go():
    options = ("f at the block's input (identity forward, all-reduce of the gradient backward); g at its output "
               "(all-reduce forward, identity backward)",
               "f at the block's input (all-reduce forward, identity backward); g at its output (identity forward, "
               "all-reduce backward)",
               "both at the output: one all-reduce forward and one backward of the output",
               "f after the first matrix multiply, g after the second")
    return Ask("In a Megatron tensor-parallel MLP block, where do the conjugate operators f and g go and what does "
               "each do?",
               Choice(options, 0),
               "Every rank uses the whole input through its own slice, so the input's gradient is a sum over the "
               "ranks: f is the identity forward and all-reduces backward. Each rank's output is a partial sum: g "
               "all-reduces forward; the output's gradient is the same on every rank, so g's backward is the "
               "identity (all-reducing it too would multiply every gradient by t).")


@card(topic="parallel training", difficulty="easy", frequency="medium", page=PAGE)
def output_bias_once():
    options = ("once, after g's all-reduce (every rank holds b2 whole)",
               "on every rank before g's all-reduce",
               "b2 / t on every rank before g's all-reduce",
               "split by columns, like b1")
    return Ask("In a tensor-parallel MLP, where is the second layer's bias b2 added?",
               Choice(options, 0),
               "Added before the sum on every rank, the output holds b2 t times. Adding b2 / t on each gives the "
               "right output but only 1/t of b2's gradient on each rank. b1 is split with W1's columns; b2 is added "
               "once, after g.")


@card(topic="parallel training", difficulty="hard", frequency="medium", page=PAGE)
def sequence_parallel_saving():
    from aisys.parallel import tensor_parallel
    t = 8
    args = (GPT3["seq"], 1, GPT3["width"], GPT3["heads"], t)
    tp_only = tensor_parallel.activation_bytes_per_layer(*args)
    with_sp = tensor_parallel.activation_bytes_per_layer(*args, sequence_parallel=True)
    saved = tp_only - with_sp
    return Ask(
        f"Korthikanti et al. (2022) count a transformer layer's activations at s b h (10 + 24/t + 5 a s/(h t)) bytes "
        f"with tensor parallelism. For one sequence (b = 1, s = {GPT3['seq']:,}) of GPT-3 175B (h = "
        f"{GPT3['width']:,}, a = {GPT3['heads']}), t = {t}, how many MB per layer per GPU does sequence parallelism "
        "save?",
        Number(saved / MB, rel=0.03, unit="MB"),
        f"Tensor parallelism leaves 10 s b h whole on every rank (LayerNorm inputs and outputs, dropout masks); "
        f"sequence parallelism splits them t ways: 10 s b h (1 - 1/t) = 10 x {GPT3['seq']:,} x {GPT3['width']:,} x "
        f"{t - 1}/{t} = {saved / MB:.0f} MB per layer, {saved * GPT3['layers'] / GIB:.1f} GiB over "
        f"{GPT3['layers']} layers, with the same bytes on the wire.")


@card(topic="parallel training", difficulty="medium", frequency="medium", page=PAGE)
def sequence_parallel_traffic():
    options = ("unchanged: each all-reduce becomes a reduce-scatter and an all-gather, (t-1)/t of the buffer each",
               "halved: only the reduce-scatter is left",
               "doubled: an all-gather is added to every all-reduce",
               "multiplied by t: every rank gathers every sequence shard")
    return Ask("Sequence parallelism (Korthikanti et al. 2022) shards LayerNorm and dropout along the sequence. "
               "How does it change tensor parallelism's communication volume per layer?",
               Choice(options, 0),
               "A ring all-reduce is a reduce-scatter followed by an all-gather. Sequence parallelism moves the "
               "all-gather to the next block's input, with LayerNorm and dropout running on s/t tokens in between: "
               "the same 2(t-1)/t of the activation per rank, for activation memory between the blocks split t "
               "ways.")
