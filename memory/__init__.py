"""Modex memory: session, pruned catalog, archive, core memory. Imports nothing from agents/."""
