"""The rules, dashboard and retired-name seams fail on their mutations of the example fleet, with their codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host.harness import Mutation, edit, failures

RULES = "prometheus/llm-fleet.yml"
DASHBOARD = "grafana/llm-fleet.json"
QUEUE = '''      - alert: LlmQueueing
        expr: vllm:num_requests_waiting > 0'''

CASES: dict[str, tuple[list[Mutation], set[tuple[str, str]]]] = {
    "INC-24 a retired vLLM series": (
        [edit(RULES, "vllm:kv_cache_usage_perc > 0.9", "vllm:gpu_cache_usage_perc > 0.9")],
        {("frank", "rules-exported/not-exported")}),
    "B-OB-3 KV-pool fill on llama.cpp": (
        [edit(RULES, "expr: llamacpp:requests_deferred > 0", "expr: llamacpp:kv_cache_usage_ratio > 0.9")],
        {("frank", "rules-exported/not-exported")}),
    "a dashboard reading vLLM series from a llama.cpp job": (
        [edit(DASHBOARD, 'vllm:num_requests_waiting{job=\\"frank-archon\\"}', 'vllm:num_requests_waiting{job=\\"frank-zealot\\"}')],
        {("frank", "rules-exported/wrong-engine")}),
    "a series of an engine the fleet never ran": (
        [edit(RULES, QUEUE, QUEUE.replace("vllm:num_requests_waiting", "sglang:num_queue_reqs"))],
        {("frank", "rules-exported/unknown-namespace")}),
    "vLLM rules after the vLLM service is gone": (
        [edit("fleet.toml", '[services.frank-archon]\n', '[services.frank-archon]\nstate = "undeployed"\n')],
        {("frank", "rules-exported/engine-not-deployed")}),
    "B-OB-2 LlmSpecDecodeOff deleted": (
        [edit(RULES, "rate(llamacpp:spec_decode_num_drafts_total[10m]) == 0", "rate(llamacpp:tokens_predicted_total[10m]) == 0")],
        {("frank-medium", "rules-drafter-alert/missing"), ("reference", "rules-drafter-alert/missing")}),
    "B-OB-5 a rule on the retired frank-small job": (
        [edit(RULES, 'up{job=~"frank-.*|reference"} == 0', 'up{job=~"frank-.*|reference"} == 0 or up{job="frank-small"} == 0')],
        {("frank", "retired-names/found")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_rules_seams_fail_on_their_mutation(case: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    mutations, expected = CASES[case]
    found = failures(pytester, tmp_path, *mutations)
    assert set(found) == expected, "\n\n".join(found.values())
