#!/bin/bash
# Stand-in written for recipegen's tests, same layout as eugr/spark-vllm-docker mods/fix-glm-4.7-flash-AWQ
# (a single run.sh, run from the mod folder in the container). eugr's real script patches vLLM for this model's
# speed; it is not copied here (fetched code stays out of commits).
set -e
echo "fix-glm-4.7-flash-AWQ applied"
