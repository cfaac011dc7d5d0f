#!/bin/bash
# A stand-in for eugr/spark-vllm-docker mods/inkling-tool-salvage (only where the import finds it is under test).
set -e
