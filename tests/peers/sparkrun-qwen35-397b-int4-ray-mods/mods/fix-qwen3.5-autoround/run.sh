#!/usr/bin/env bash
# Stand-in written for recipegen's tests, same layout as eugr/spark-vllm-docker mods/fix-qwen3.5-autoround (a run.sh that
# patches the installed vLLM in place: AutoRound INT4 loading for Qwen3.5). The real patch is not copied (fetched code stays out of
# commits); this one only records that it ran, so a test deployment shows the mod step's order and cwd.
set -e
mkdir -p /tmp/recipegen-peers
echo "fix-qwen3.5-autoround ran in $(pwd) with WORKSPACE_DIR=${WORKSPACE_DIR:-unset}" >> /tmp/recipegen-peers/mods.log
