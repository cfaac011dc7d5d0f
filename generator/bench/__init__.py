"""`recipegen bench`: llama-benchy against a running head. options.py: what to run; runner.py: running it;
live.py: its progress events; results.py: results.json and CSV; plot.py: the PNG; compare.py: the last two runs
side by side; action.py: all of it, returning what it wrote."""
