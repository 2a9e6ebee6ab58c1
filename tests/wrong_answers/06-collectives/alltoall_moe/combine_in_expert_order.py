"""Returns the expert outputs in the order they come back (sorted by expert), without undoing the sort."""

FAILS = ["combine"]


def combine(expert_outputs, plan):
    returned = expert_outputs.new_empty((sum(plan["send_splits"]), expert_outputs.shape[1]))
    all_to_all_single(returned, expert_outputs, plan["send_splits"], plan["recv_splits"])  # noqa: F821
    output = expert_outputs.new_zeros((plan["num_tokens"], expert_outputs.shape[1]))
    output[:len(returned)] = returned
    return output
