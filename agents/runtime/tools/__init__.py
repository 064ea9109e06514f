"""Agent tools, compiled per agent from its declaration (``agents.runtime.tools.registry.compile_roster``)."""
