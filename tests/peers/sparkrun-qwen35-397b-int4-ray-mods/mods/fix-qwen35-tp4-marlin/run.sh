#!/usr/bin/env bash
# Stand-in written for recipegen's tests, same layout as eugr/spark-vllm-docker mods/fix-qwen35-tp4-marlin (a run.sh that
# patches the installed vLLM in place: Marlin kernel shapes for Qwen3.5 at TP>2). The real patch is not copied (fetched code stays out of
# commits); this one only records that it ran, so a test deployment shows the mod step's order and cwd.
set -e
mkdir -p /tmp/recipegen-peers
echo "fix-qwen35-tp4-marlin ran in $(pwd) with WORKSPACE_DIR=${WORKSPACE_DIR:-unset}" >> /tmp/recipegen-peers/mods.log
