#!/bin/bash
# Stand-in written for recipegen's tests, same layout as eugr/spark-vllm-docker@74c02c37
# mods/fix-Salyut1-GLM-4.7-NVFP4 (MIT): run.sh + glm4_moe.patch, applied from the mod folder against /.
# eugr's real patch edits vLLM's glm4_moe model; it is not copied here (fetched code stays out of commits).
set -e
patch -p1 -d / < glm4_moe.patch
