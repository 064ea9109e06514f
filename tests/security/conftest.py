"""The security tests reuse the chat fixtures (declaration, runtime over private services, the
origin validator's hosts), the declaration fixtures and the cast of tests/conftest.py."""

from tests.agents.chat.conftest import allowed_hosts, chat_bot, chat_runtime, conversation, make_runtime  # noqa: F401
from tests.agents.conftest import _fresh_boot_declaration, bot_file, staff  # noqa: F401
from tests.agents.llm.conftest import make_model, sleeps  # noqa: F401,E402
