#!/bin/bash
# A stand-in for eugr/spark-vllm-docker mods/instanttensor-hybrid-draft-loader (only where the import finds it is under test).
set -e
