"""The security tests reuse the chat fixtures (declaration, runtime over private services, the
origin validator's hosts) and the cast of tests/conftest.py."""

from tests.agents.chat.conftest import allowed_hosts, chat_bot, chat_runtime, conversation, make_runtime  # noqa: F401
