"""Divides the time after the first token by output_len, as if the prefill's token were a decode too."""

FAILS = ["latency_metrics"]


def latency_metrics(requests, results):
    ttft = [res["first_token"] - req["arrival"] for req, res in zip(requests, results)]
    tpot = [(res["finish"] - res["first_token"]) / req["output_len"] for req, res in zip(requests, results)]
    makespan = max(res["finish"] for res in results) - min(req["arrival"] for req in requests)
    metrics = {"throughput": sum(req["output_len"] for req in requests) / makespan}
    for name, values in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 99):
            metrics[f"{name}_p{q}"] = float(np.percentile(values, q))  # noqa: F821
    return metrics
