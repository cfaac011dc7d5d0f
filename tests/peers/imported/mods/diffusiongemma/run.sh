#!/bin/bash
# A stand-in for eugr/spark-vllm-docker mods/diffusiongemma (only where the import finds it is under test).
set -e
