"""The staff page of changes proposed to shared core memory (SOUL.md), and the Dream Engine's warnings."""
