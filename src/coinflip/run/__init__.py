"""The run: plan, the one orchestrator, the stop signals, progress."""
