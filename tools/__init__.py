"""fusebench tools: running, gating and comparing results (python -m tools.gate, python -m tools.compare_runs)."""
