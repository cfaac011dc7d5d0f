"""Will it fit (issue 32): memory per rank judged at validate, against real models' config.json files
(tests/fixtures/hf-cache, sources in its SOURCES.md) and figures published independently of this code (model
cards' parameter counts, vLLM's own boot logs). Every judgement through the real CLI: error, warning with the
length that fits, note with the KV capacity, unknown input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import HF_FIXTURE_CACHE
from generator.cli import main
from generator.engines.memory import GIB, kv_per_token, stage_layers
from generator.engines.modelshape import model_shape

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "tests" / "lint" / "cluster.toml"  # two nodes, one GPU each (GB10 default memory)
LINE = re.compile(r"^(?P<file>[^:\n]+)(?::\d+:\d+)?: (?P<severity>error|warning|note)\[(?P<rule>[a-z-]+)\]: "
                  r"(?P<key>[^:\n]+): (?P<message>.*)$", re.M)


def config(model: str) -> dict:
    return json.loads((HF_FIXTURE_CACHE / f"models--{model.replace('/', '--')}" / "snapshots" / "fixture"
                       / "config.json").read_text("utf-8"))


@pytest.fixture
def cache(monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(HF_FIXTURE_CACHE))
    monkeypatch.chdir(ROOT)


def recipe(tmp_path: Path, model: str, args: list[str], nodes: int = 2, tp: int | None = None, pp: int = 1,
           name: str = "case") -> Path:
    path = tmp_path / name / "recipe.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    tp = tp if tp is not None else nodes // pp
    path.write_text(f'engine = "vllm"\ndocker_image = "vllm/vllm-openai:v0.34.0"\nmodel = "{model}"\n'
                    f"required_nodes = {nodes}\ntensor_parallel_size = {tp}\npipeline_parallel_size = {pp}\n"
                    f"args = {json.dumps(args)}\n", "utf-8")
    return path


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def validate(path: Path, cluster: Path = CLUSTER, *extra: str):
    return run("validate", str(path), "--cluster", str(cluster), *extra)


def lines(result) -> list[dict[str, str]]:
    return [m.groupdict() for m in LINE.finditer(result.stderr)]


def gib_in(text: str, label: str) -> float:
    match = re.search(rf"{label} ([0-9.]+) GiB", text)
    assert match, text
    return float(match[1])


# --- the estimate against published figures ------------------------------------------------------------------

@pytest.mark.parametrize("model, params_b", [
    ("Qwen/Qwen3-32B", 32.8),  # model card: "Number of Parameters: 32.8B"
    ("Qwen/Qwen3-8B", 8.2),  # model card: 8.2B
    ("Qwen/Qwen3-30B-A3B", 30.5),  # model card: 30.5B in total
    ("meta-llama/Llama-3.1-8B", 8.03),  # model card: 8.03B
    ("Qwen/Qwen3-4B", 4.0),  # model card: 4.0B; tied embeddings, counted once
])
def test_bf16_weights_match_the_model_cards_parameter_counts(model, params_b):
    shape = model_shape(config(model))
    params = (shape.weights.total(shape.layers) - shape.weights.mtp) / 2  # bf16: 2 bytes a parameter
    assert abs(params / 1e9 - params_b) / params_b < 0.02


def test_fp8_moe_with_mla_and_mtp_matches_deepseek_v3s_card():
    """DeepSeek-V3's card: 671B main model + 14B MTP module = 685B, stored in FP8 (one byte a weight; the
    embedding and lm_head, 0.9B each, in bf16)."""
    shape = model_shape(config("deepseek-ai/DeepSeek-V3"))
    main_bytes = shape.weights.total(shape.layers) - shape.weights.mtp
    assert abs(main_bytes / 1e9 - (671 + 0.9 * 2)) / 671 < 0.03
    assert 11 < shape.weights.mtp / 1e9 < 16  # "11.5B unique parameters" (README_WEIGHTS.md)


def test_fp8_moe_without_shared_experts_matches_minimax_m2s_card():
    """MiniMax-M2's card: 230B total parameters, FP8 (embedding and lm_head, 0.6B each, kept in bf16)."""
    shape = model_shape(config("MiniMaxAI/MiniMax-M2"))
    stored = shape.weights.total(shape.layers) - shape.weights.embed - shape.weights.head
    params = stored + (shape.weights.embed + shape.weights.head) / 2
    assert abs(params / 1e9 - 230) / 230 < 0.03


def test_weights_per_rank_match_vllms_log_for_qwen3_30b_a3b_on_four_gpus(cache, tmp_path):
    """vllm-project/vllm#17469: Qwen3-30B-A3B, TP 4: "Model loading took 14.2474 GiB"."""
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER.read_text("utf-8").replace('name = "lint-duo"', 'name = "four"\ngpus_per_node = 2'),
                       "utf-8")
    result = run("fit", str(recipe(tmp_path, "Qwen/Qwen3-30B-A3B", ["--max-model-len", "8192"], tp=4)),
                 "--cluster", str(cluster))
    row = next(line for line in result.stdout.splitlines() if line.startswith("rank 0-3"))
    weights = float(row.split("GiB")[1].strip())
    assert abs(weights - 14.2474) / 14.2474 < 0.05, row


def test_kv_per_token_matches_vllms_log_for_qwen3_235b_on_four_gpus():
    """vllm-project/vllm#21348: Qwen3-235B-A22B-FP8, TP 4, "Available KV cache memory: 8.11 GiB", "GPU KV cache
    size: 178,880 tokens"."""
    shape = model_shape(config("Qwen/Qwen3-235B-A22B-2507"))
    full, sliding = kv_per_token(shape, shape.layers, 4, "auto")
    assert sliding == 0
    tokens = 8.11 * GIB / full
    assert abs(tokens - 178_880) / 178_880 < 0.10


def test_mla_kv_is_one_latent_per_layer_on_every_rank():
    """MLA keeps kv_lora_rank + qk_rope_head_dim per token and layer, replicated across TP (vLLM's
    MLAAttentionSpec, num_kv_heads 1), where a dense model's KV per rank shrinks with TP."""
    shape = model_shape(config("deepseek-ai/DeepSeek-V3"))
    one = kv_per_token(shape, shape.layers, 1, "auto")[0]
    assert one == kv_per_token(shape, shape.layers, 8, "auto")[0] == 61 * (512 + 64) * 2
    assert kv_per_token(shape, shape.layers, 1, "fp8_ds_mla")[0] == 61 * 656  # the packed sparse-MLA slot
    dense = model_shape(config("Qwen/Qwen3-32B"))
    assert kv_per_token(dense, 64, 2, "auto")[0] * 2 == kv_per_token(dense, 64, 1, "auto")[0]
    assert kv_per_token(dense, 64, 1, "fp8")[0] * 2 == kv_per_token(dense, 64, 1, "auto")[0]


def test_pipeline_layers_split_as_vllms_get_pp_indices():
    assert stage_layers(32, 3) == [11, 11, 10]  # the remainder goes to the stages before the last
    assert stage_layers(61, 2) == [31, 30]
    assert stage_layers(36, 4) == [9, 9, 9, 9]


# --- the judgements, through validate ------------------------------------------------------------------------

def test_error_when_the_weights_alone_exceed_a_ranks_budget(cache, tmp_path):
    result = validate(recipe(tmp_path, "deepseek-ai/DeepSeek-V3", ["--max-model-len", "32768"]))
    (found,) = lines(result)
    assert (found["severity"], found["rule"], found["key"]) == ("error", "fit", "model")
    assert "rank 0-1 (node1, node2)" in found["message"]
    assert gib_in(found["message"], "holds") > gib_in(found["message"], "budget")
    assert "0.9" in found["message"] and "119.6 GiB" in found["message"]
    assert result.exit_code == 1


def test_the_cluster_gpu_memory_key_moves_the_budget(cache, tmp_path):
    """A node with more memory than a GB10 holds what a GB10 cannot."""
    big = tmp_path / "cluster.toml"
    big.write_text(CLUSTER.read_text("utf-8").replace("gpu_memory_ceiling = 0.9",
                                                      'gpu_memory_ceiling = 0.9\ngpu_memory = "400GiB"'), "utf-8")
    path = recipe(tmp_path, "deepseek-ai/DeepSeek-V3", ["--max-model-len", "32768"])
    assert [f["rule"] for f in lines(validate(path))] == ["fit"]
    assert [f["rule"] for f in lines(validate(path, big))] == ["fit-capacity"]


def test_warning_names_the_largest_max_model_len_that_fits(cache, tmp_path):
    """Qwen3-32B in bf16 on one GB10: 61 GiB of weights leave room for fewer than 262,144 tokens of KV."""
    result = validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "262144"], nodes=1))
    (found,) = lines(result)
    assert (found["severity"], found["rule"], found["key"]) == ("warning", "fit-context", "args")
    longest = int(re.search(r"largest --max-model-len that fits is (\d+)", found["message"])[1])
    assert result.exit_code == 0 and validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "262144"],
                                                     nodes=1), CLUSTER, "--strict").exit_code == 1
    # The number is the boundary: it passes, a block more does not.
    at = lines(validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", str(longest)], nodes=1, name="at")))
    over = lines(validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", str(longest + 16)], nodes=1,
                                 name="over")))
    assert [f["rule"] for f in at] == ["fit-capacity"]
    assert [f["rule"] for f in over] == ["fit-context"]


def test_note_gives_the_kv_pools_tokens_and_the_concurrency_at_full_length(cache, tmp_path):
    result = validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "32768"]), CLUSTER, "--strict")
    (found,) = lines(result)
    assert (found["severity"], found["rule"]) == ("note", "fit-capacity")
    assert result.exit_code == 0 and "ok" in result.stdout  # a note never fails, not even with --strict
    pool = gib_in(found["message"], "KV cache")
    tokens = int(re.search(r"about ([0-9,]+) tokens", found["message"])[1].replace(",", ""))
    requests = float(re.search(r"([0-9.]+) requests of 32,768 tokens", found["message"])[1])
    # Qwen3-32B, TP 2: 64 layers x 2 (K, V) x 4 KV heads per rank x 128 x 2 bytes per token.
    assert abs(tokens - pool * GIB / (64 * 2 * 4 * 128 * 2)) / tokens < 0.01
    assert abs(requests * 32768 - tokens) / tokens < 0.01


def test_unknown_input_is_one_note_never_a_failure(cache, tmp_path):
    result = validate(recipe(tmp_path, "Qwen/Qwen3-Coder-480B-A35B-Instruct", ["--max-model-len", "32768"]),
                      CLUSTER, "--strict")
    (found,) = lines(result)
    assert (found["severity"], found["rule"]) == ("note", "fit-unknown")
    assert "Qwen/Qwen3-Coder-480B-A35B-Instruct" in found["message"] and "recipegen fit case" in found["message"]
    assert result.exit_code == 0


def test_no_local_cache_at_all_says_nothing_in_validate(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(ROOT)
    result = validate(recipe(tmp_path, "deepseek-ai/DeepSeek-V3", ["--max-model-len", "32768"]), CLUSTER, "--strict")
    assert result.exit_code == 0 and result.stderr == ""


def test_auto_max_model_len_is_judged_at_the_length_vllm_would_fit(cache, tmp_path):
    """`--max-model-len auto` (or -1): vLLM fits the longest context the pool holds, up to the model's own; here
    a 0.62 share leaves less than Qwen3-32B's 40,960."""
    share = ["--gpu-memory-utilization", "0.62"]
    result = validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "auto", *share], nodes=1))
    (found,) = lines(result)
    assert found["rule"] == "fit-capacity" and "auto-fit to" in found["message"]
    fitted = int(re.search(r"auto-fit to ([0-9,]+)", found["message"])[1].replace(",", ""))
    assert fitted < config("Qwen/Qwen3-32B")["max_position_embeddings"]
    at = validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", str(fitted), *share], nodes=1, name="at"))
    over = validate(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", str(fitted + 16), *share], nodes=1,
                           name="over"))
    assert [f["rule"] for f in lines(at)] == ["fit-capacity"]
    assert [f["rule"] for f in lines(over)] == ["fit-context"]


def test_a_lower_memory_share_turns_the_same_recipe_into_an_error(cache, tmp_path):
    """gpt-oss-120b (MXFP4 experts, ~61 GiB) fits one GB10 at 0.9 but not at 0.5."""
    ok = lines(validate(recipe(tmp_path, "openai/gpt-oss-120b", ["--max-model-len", "131072"], nodes=1)))
    low = lines(validate(recipe(tmp_path, "openai/gpt-oss-120b", ["--max-model-len", "131072",
                                                                   "--gpu-memory-utilization", "0.5"], nodes=1,
                                name="low")))
    assert [f["rule"] for f in ok] == ["fit-capacity"]
    assert [f["rule"] for f in low] == ["fit"]


def test_sliding_window_layers_hold_only_their_window(cache, tmp_path):
    """gpt-oss alternates full and 128-token sliding layers: doubling the context adds only the full layers."""
    shape = model_shape(config("openai/gpt-oss-120b"))
    full, sliding = kv_per_token(shape, shape.layers, 1, "auto")
    assert full == sliding == 18 * 2 * 8 * 64 * 2


# --- recipegen fit: the table ---------------------------------------------------------------------------------

def test_fit_prints_each_pipeline_stage_and_the_heavier_rank(cache, tmp_path):
    three = tmp_path / "cluster.toml"
    three.write_text(CLUSTER.read_text("utf-8") + '\n[[nodes]]\nname = "node3"\naddress = "192.168.100.12"\n'
                                                  'context = "node3"\n', "utf-8")
    result = run("fit", str(recipe(tmp_path, "meta-llama/Llama-3.1-8B", ["--max-model-len", "8192"], nodes=3,
                                   pp=3)), "--cluster", str(three))
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines() if line.startswith("rank ")]
    assert [r[:3] for r in rows] == [["rank", "0", "(node1)"], ["rank", "1", "(node2)"], ["rank", "2", "(node3)"]]
    assert [int(r[3]) for r in rows] == [11, 11, 10]
    weights = [float(r[6]) for r in rows]
    # The first stage holds the embedding with its 11 layers, the last lm_head with 10: the middle is lightest.
    assert weights[1] < weights[0] and weights[1] < weights[2]


def test_fit_reads_a_config_the_user_gives(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(ROOT)
    given = HF_FIXTURE_CACHE / "models--Qwen--Qwen3-8B" / "snapshots" / "fixture" / "config.json"
    path = recipe(tmp_path, "some-org/private-model", ["--max-model-len", "32768"], nodes=1)
    result = run("fit", str(path), "--cluster", str(CLUSTER), "--config", str(given))
    assert result.exit_code == 0, result.output
    assert "rank 0 (node1)" in result.stdout and "note[fit-capacity]" in result.stderr
    unknown = run("fit", str(path), "--cluster", str(CLUSTER))
    assert unknown.exit_code == 0 and "note[fit-unknown]" in unknown.stderr and "rank 0" not in unknown.stdout


def test_fit_reads_safetensors_headers_in_a_model_folder(tmp_path, monkeypatch):
    """A model folder (what the lab's tiny model is): the tensors' bytes come from the safetensors header."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(ROOT)
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "torch_dtype": "bfloat16",
        "max_position_embeddings": 2048}), "utf-8")
    tensors = {"model.embed_tokens.weight": 3 * GIB, "model.layers.0.mlp.up_proj.weight": GIB,
               "model.layers.1.mlp.up_proj.weight": GIB, "lm_head.weight": GIB}
    header, offset = {}, 0
    for name, size in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [size // 2], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw)  # the header alone
    result = run("fit", str(recipe(tmp_path, "tiny-org/tiny", ["--max-model-len", "2048"], nodes=1)), "--cluster",
                 str(CLUSTER), "--config", str(folder))
    assert "safetensors headers (1 file)" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("rank 0"))
    assert "6.0 GiB" in row  # 3 + 1 + 1 + 1 GiB, as the header says


def test_explain_shows_the_same_figures_as_fit(cache, tmp_path):
    path = recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "32768"])
    fit = run("fit", str(path), "--cluster", str(CLUSTER))
    explained = run("explain", str(path), "--cluster", str(CLUSTER))
    rows = [line for line in fit.stdout.splitlines() if line.startswith(("ranks", "rank "))]
    assert rows and all(f"  {row}" in explained.stdout.splitlines() for row in rows)
    assert "memory per rank (recipegen fit)" in explained.stdout


def test_gpt_oss_weights_match_vllms_marlin_log():
    """vllm-project/vllm#23278: gpt-oss-120b on one H100, Marlin MoE: "Model loading took 65.9651 GiB" (MXFP4
    experts, padded as vLLM's Marlin kernel needs; attention, embedding and lm_head in bf16)."""
    shape = model_shape(config("openai/gpt-oss-120b"))
    assert abs(shape.weights.total(shape.layers) / GIB - 65.9651) / 65.9651 < 0.05


def _weights(result) -> float:
    row = next(line for line in result.stdout.splitlines() if line.startswith("rank 0"))
    return float(row.split("GiB")[1].strip())


def test_speculative_drafts_are_counted_or_named(cache, tmp_path):
    """MTP loads the model's own next-token layers (DeepSeek-V3: one layer, ~11.5B parameters in FP8, split over
    TP 2); a method recipegen cannot size is named as not counted."""
    big = tmp_path / "cluster.toml"
    big.write_text(CLUSTER.read_text("utf-8").replace("gpu_memory_ceiling = 0.9",
                                                      'gpu_memory_ceiling = 0.9\ngpu_memory = "400GiB"'), "utf-8")
    base = ["--max-model-len", "32768"]

    def fit_with(name: str, *spec: str):
        return run("fit", str(recipe(tmp_path, "deepseek-ai/DeepSeek-V3", [*base, *spec], name=name)),
                   "--cluster", str(big))

    plain = fit_with("plain")
    mtp = fit_with("mtp", "--speculative-config", """'{"method": "mtp", "num_speculative_tokens": 1}'""")
    added = _weights(mtp) - _weights(plain)
    assert 11.5e9 / 2 / GIB * 0.9 < added < 11.5e9 / 2 / GIB * 1.3, (plain.stdout, mtp.stdout)
    other = fit_with("dspark", "--speculative-config", """'{"method": "dspark", "num_speculative_tokens": 5}'""")
    assert "not counted: the 'dspark' draft" in other.stdout


def test_docs_table_is_what_the_accuracy_script_prints():
    """docs/fit.md's table of errors is benchmarks/fit_accuracy.py's output, not figures typed by hand."""
    import subprocess
    import sys

    printed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fit_accuracy.py")], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    assert printed.strip() and printed.strip() in (ROOT / "docs" / "fit.md").read_text("utf-8")


def test_fit_exits_1_only_when_a_rank_cannot_load(cache, tmp_path):
    too_big = run("fit", str(recipe(tmp_path, "deepseek-ai/DeepSeek-V3", ["--max-model-len", "32768"])),
                  "--cluster", str(CLUSTER))
    assert too_big.exit_code == 1 and "error[fit]" in too_big.stderr and "rank 0-1" in too_big.stdout
    too_long = run("fit", str(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "262144"], nodes=1,
                                     name="long")), "--cluster", str(CLUSTER))
    assert too_long.exit_code == 0 and "warning[fit-context]" in too_long.stderr


@pytest.mark.parametrize("word, share", [("8e-1", 0.8), ("0.75", 0.75), (".5", 0.5)])
def test_the_gpu_share_is_one_number_for_the_lint_rules_and_fit(tmp_path, cache, word, share):
    """--gpu-memory-utilization is read as the engine's float() reads it, the same by gpu-memory and by fit
    (issue 41: two number rules read it before, and `8e-1` was 0.8 to one and the default 0.9 to the other)."""
    from generator.check.fitreport import fit_report
    from generator.engines.ranks import memory_fraction
    from generator.resolve.load import load_cluster, load_recipe

    loaded = load_recipe(recipe(tmp_path, "Qwen/Qwen3-8B", ["--gpu-memory-utilization", word], nodes=1))
    report = fit_report(loaded, load_cluster(CLUSTER))
    assert memory_fraction(loaded)[1] == share
    assert report.settings.utilization == share, report


def test_each_lint_reads_the_model_files_afresh(tmp_path, monkeypatch):
    """The fit rules share one computation per lint of a recipe, passed to them, not a module-level cache: a
    recipe linted again after its model's config.json changed is judged on the new file (issue 41 item 5)."""
    from generator.check.rules import lint_recipe
    from generator.resolve.load import load_recipe

    hub = tmp_path / "hub"
    snapshot = hub / "models--org--m" / "snapshots" / "fixture"
    snapshot.mkdir(parents=True)
    given = config("Qwen/Qwen3-8B")
    (snapshot / "config.json").write_text(json.dumps(given), "utf-8")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.chdir(ROOT)
    loaded = load_recipe(recipe(tmp_path, "org/m", ["--max-model-len", "32768"], nodes=1), tmp_path)
    from generator.build import load_checked_cluster

    cluster, _ = load_checked_cluster(CLUSTER)

    def rules() -> list[str]:
        return [d.rule or "" for d in lint_recipe(loaded, cluster, lambda _r, _c: [])]

    assert "fit-capacity" in rules()
    (snapshot / "config.json").write_text(json.dumps({**given, "num_hidden_layers": 3600}), "utf-8")
    assert "fit" in rules()


def test_fit_without_model_files_says_where_it_looked_and_how_to_fetch_them(tmp_path, monkeypatch):
    """The machine that deploys has no model files (issue 43 item 6): the note names the cache it looked in and
    the command that fetches just the files fit reads."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none"))
    monkeypatch.chdir(ROOT)
    result = run("fit", str(recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "32768"], nodes=1)),
                 "--cluster", str(CLUSTER))
    assert result.exit_code == 0
    assert str(tmp_path / "none") in result.stderr
    assert "hf download Qwen/Qwen3-32B config.json model.safetensors.index.json" in result.stderr


def test_fit_looks_in_the_clusters_hf_cache_when_it_is_on_this_machine(tmp_path, monkeypatch):
    """Run on a Spark: the cluster's hf_cache (mounted into the engines) holds the model; it is read too (unless
    HF_HUB_CACHE or HF_HOME names the cache, as huggingface_hub has it)."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # huggingface_hub's default cache: empty here
    monkeypatch.chdir(ROOT)
    shared = tmp_path / "hf"
    (shared / "hub").mkdir(parents=True)
    import shutil

    shutil.copytree(HF_FIXTURE_CACHE / "models--Qwen--Qwen3-32B", shared / "hub" / "models--Qwen--Qwen3-32B")
    spark = tmp_path / "cluster.toml"
    spark.write_text(CLUSTER.read_text("utf-8").replace('user = "spark"', f'user = "spark"\nhf_cache = "{shared}"'),
                     "utf-8")
    path = recipe(tmp_path, "Qwen/Qwen3-32B", ["--max-model-len", "32768"], nodes=1)
    result = run("fit", str(path), "--cluster", str(spark))
    assert result.exit_code == 0 and "rank 0 (node1)" in result.stdout, result.output
    assert str(shared / "hub") in result.stdout
    assert [f["rule"] for f in lines(validate(path, spark))] == ["fit-capacity"]
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))  # said where the cache is: that one alone
    assert [f["rule"] for f in lines(validate(path, spark))] == ["fit-unknown"]
