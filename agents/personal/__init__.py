"""A person's own pages: their memory of each agent and their personal API tokens."""
