"""The metrics stack's recording and alert rules (Prometheus's rule files), for vLLM's and SGLang's names.

Every expression groups by `recipe`, the label each head's target carries (plan/metrics.py), so one rule covers
every recipe of either engine: the vLLM form `or` the SGLang form (a recipe has one engine, so one side is empty).
"""

from __future__ import annotations

from typing import Any

from generator.plan.metrics import ENGINE_JOB, NODE_JOB, PROBE_JOB, ROUTER_JOB, MetricsPlan

# (vLLM's name, SGLang's name) of each engine metric the rules read.
GENERATION = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
PROMPT = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "sglang:token_usage")  # a fraction, 0 to 1, on both
TTFT = ("vllm:time_to_first_token_seconds_bucket", "sglang:time_to_first_token_seconds_bucket")
ITL = ("vllm:inter_token_latency_seconds_bucket", "sglang:inter_token_latency_seconds_bucket")
KV_SATURATED = 0.95  # of the KV cache in use, for 5 minutes: new requests wait or preempt running ones
MEMORY_LOW = 0.05  # of the node's memory available (GB10: unified, shared by the OS and the GPU)


def _either(form: str, names: tuple[str, str]) -> str:
    return " or ".join(form.format(name) for name in names)


def recording_rules(plan: MetricsPlan) -> list[dict[str, Any]]:
    w, q = plan.rate_window, plan.quantile_window
    rules = [
        ("recipe:generation_tokens:rate", _either(f"sum by (recipe) (rate({{}}[{w}]))", GENERATION)),
        ("recipe:prompt_tokens:rate", _either(f"sum by (recipe) (rate({{}}[{w}]))", PROMPT)),
        ("recipe:requests_running", _either("sum by (recipe) ({})", RUNNING)),
        ("recipe:requests_waiting", _either("sum by (recipe) ({})", WAITING)),
        ("recipe:kv_cache_usage:ratio", _either("max by (recipe) ({})", KV_USAGE)),
        ("recipe:preemptions:rate", "sum by (recipe) (rate(vllm:num_preemptions_total[" + w + "]))"),
    ]
    for quantile in ("0.5", "0.95"):
        tag = "p50" if quantile == "0.5" else "p95"
        rules.append((f"recipe:ttft_seconds:{tag}", _either(
            f"histogram_quantile({quantile}, sum by (recipe, le) (rate({{}}[{q}])))", TTFT)))
        rules.append((f"recipe:itl_seconds:{tag}", _either(
            f"histogram_quantile({quantile}, sum by (recipe, le) (rate({{}}[{q}])))", ITL)))
    rules += [
        ("node:memory_available:ratio", f'node_memory_MemAvailable_bytes{{job="{NODE_JOB}"}} / '
                                        f'node_memory_MemTotal_bytes{{job="{NODE_JOB}"}}'),
        ("node:cpu_busy:ratio", f'1 - avg by (node) (rate(node_cpu_seconds_total{{job="{NODE_JOB}",mode="idle"}}'
                                f'[{w}]))'),
    ]
    return [{"name": "recipegen-recording", "rules": [{"record": r, "expr": e} for r, e in rules]}]


def alert_rules(plan: MetricsPlan) -> list[dict[str, Any]]:
    wedge = plan.settings.wedge_after
    flat = "\nor\n".join(
        f"(sum by (recipe) (increase({gen}[{wedge}])) + sum by (recipe) (increase({prompt}[{wedge}])) == 0\n"
        f"  and on (recipe) min by (recipe) (min_over_time({running}[{wedge}])) > 0)"
        for gen, prompt, running in zip(GENERATION, PROMPT, RUNNING))
    alerts = [
        _alert("TargetDown", f'up{{job=~"{ENGINE_JOB}|{ROUTER_JOB}|{NODE_JOB}"}} == 0', "2m", "critical",
               "{{ $labels.job }} target {{ $labels.instance }} is down",
               "Prometheus could not scrape it for 2 minutes. A recipe that `recipegen down` stopped is not "
               "scraped at all, so it never alerts here."),
        _alert("EngineWedged", flat, "1m", "critical",
               "recipe {{ $labels.recipe }} produces no token while requests run",
               f"Neither generation nor prompt tokens grew for {wedge} while requests were running: the engine "
               "is wedged (its /health and /v1/models may still answer)."),
        _alert("EngineNotAnswering",
               f'probe_success{{job="{PROBE_JOB}"}} == 0\nand on (recipe) up{{job="{ENGINE_JOB}"}} == 1', wedge,
               "critical", "recipe {{ $labels.recipe }} does not answer a one-token completion",
               f"The blackbox exporter's one-token completion got no answer within {plan.settings.probe_timeout} "
               f"for {wedge}, while /metrics answers: a frozen engine core keeps /health at 200 and its gauges at "
               "their last values, so only a real request sees it."),
        _alert("KVCacheSaturated", f"recipe:kv_cache_usage:ratio > {KV_SATURATED}", "5m", "warning",
               "recipe {{ $labels.recipe }} has its KV cache {{ $value | humanizePercentage }} full",
               "New requests wait or preempt running ones: lower max-num-seqs or the context, or add nodes."),
        _alert("HostMemoryLow", f"node:memory_available:ratio < {MEMORY_LOW}", "2m", "critical",
               "node {{ $labels.node }} has {{ $value | humanizePercentage }} of its memory available",
               "GB10's memory is unified: below this the kernel's OOM killer or a hang takes the node's engine."),
    ]
    return [{"name": "recipegen-alerts", "rules": alerts}]


def _alert(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_, "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description}}
