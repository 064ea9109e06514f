from tests.agents.inspection.support import *  # noqa: F401,F403 - shared fixtures
