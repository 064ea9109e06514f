"""Experience, the tool supplement: EXPERIENCE.md lessons, the agent's tool, the reviewer."""
