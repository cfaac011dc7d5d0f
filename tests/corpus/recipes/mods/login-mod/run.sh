#!/bin/sh
# logs in to the hub before the engine starts
huggingface-cli login --token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789
