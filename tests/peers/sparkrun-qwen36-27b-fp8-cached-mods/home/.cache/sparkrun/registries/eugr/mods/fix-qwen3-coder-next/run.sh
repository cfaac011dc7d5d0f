#!/usr/bin/env bash
# Stand-in written for recipegen's tests, same layout as eugr/spark-vllm-docker mods/fix-qwen3-coder-next (a run.sh that
# patches the installed vLLM in place: a Qwen3-Coder-Next tool-parser fix). The real patch is not copied (fetched code stays out of
# commits); this one only records that it ran, so a test deployment shows the mod step's order and cwd.
set -e
mkdir -p /tmp/recipegen-peers
echo "fix-qwen3-coder-next ran in $(pwd) with WORKSPACE_DIR=${WORKSPACE_DIR:-unset}" >> /tmp/recipegen-peers/mods.log
