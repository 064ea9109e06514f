"""Agent tools, compiled per agent from its declaration (``agents.tools.registry.compile_roster``)."""
