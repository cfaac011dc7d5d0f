#!/bin/bash
# A stand-in for eugr/spark-vllm-docker mods/inkling-sm12-paged-kv (only where the import finds it is under test).
set -e
