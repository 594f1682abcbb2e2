"""Reading a results directory: its documents (bench.json, runs.json, metrics.json) and each run's log lines."""
