"""Modex agents: declarations, runtime, chat."""
