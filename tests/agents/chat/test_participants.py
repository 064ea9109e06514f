"""The user's own name, as the account gives it, is not something to search the archive for.

Through the real ASGI stack and runtime: a user named Nadia asks about herself in the third
person; the archive recall the model receives holds what she said, not every turn that greeted
her by name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import sync_to_async

from agents.chat import service as chat
from agents.personal.memory import participant_names
from agents.runtime.tools.history_tools import archive_scope_for
from memory.messages import Message
from memory.stores.base import ArchiveDocument
from tests.agents.chat.conftest import CHAT_BOT_YML, IDLE, connected, receive_until
from tests.agents.chat.test_consumer import send
from tests.agents.support import RecordingModel

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("allowed_hosts", "live_turns")]

PAINTING = "I took up painting to unwind, watercolour landscapes of the river mostly."
GREETINGS = ("Nadia! Good to hear from you.", "Nadia, that sounds lovely.", "Tell me, Nadia!")


@pytest.fixture
def archive_bot(chat_bot):
    chat_bot.write_text(CHAT_BOT_YML.replace(
        "      compression_threshold: 700", "      archive_enabled: true\n      compression_threshold: 700"))
    return chat_bot


def archived(*texts: str, day: int) -> ArchiveDocument:
    start = datetime(2023, 5, 8, 9, 0, tzinfo=UTC) + timedelta(days=day)
    messages = tuple(
        Message(role=("user", "assistant")[i % 2], content=text, created_at=start + timedelta(minutes=i)).with_seq(i + 1)
        for i, text in enumerate(texts)
    )
    return ArchiveDocument(session=f"session:earlier-{day}", summary="", messages=messages, title="Catching up")


def test_the_names_are_the_accounts_first_and_last_name(django_user_model, db):
    named = django_user_model(username="nadia.k", first_name=" Nadia ", last_name="Karimi")
    assert participant_names(named) == ("Nadia", "Karimi")
    assert participant_names(django_user_model(username="owner")) == ()  # the login name is not one


async def ask(runtime, model, user, question: str) -> str:
    """What archive recall gave the model for ``question``, asked by ``user`` in a new conversation."""
    scope = archive_scope_for(agent="default", user_id=str(user.pk))
    await sync_to_async(runtime.services.bundle.archive.put)(scope, archived(
        "Hi Felix! Long time, the hospital has me on nights.", GREETINGS[0], PAINTING, GREETINGS[1], day=0))
    await sync_to_async(runtime.services.bundle.archive.put)(scope, archived(
        "Guess what, big news from the exhibition.", GREETINGS[2], day=4))
    conversation = await sync_to_async(chat.create_conversation)(user=user, agent="default")
    comm = await connected(conversation, user)
    await send(comm, question)
    await receive_until(comm, IDLE)
    await comm.disconnect()
    system = model.requests[-1]["messages"][0]["content"]
    return system.split("<archive_recall>")[1].split("</archive_recall>")[0]


async def test_a_question_naming_the_user_recalls_what_she_said_not_who_greeted_her(
    archive_bot, make_runtime, django_user_model
):
    model = RecordingModel()
    runtime = make_runtime(model=model)
    create = sync_to_async(django_user_model.objects.create_user)
    nadia = await create(username="nk", password="nk-pw-12345", first_name="Nadia")
    unnamed = await create(username="nk2", password="nk-pw-12345")  # the account says no name

    recall = await ask(runtime, model, nadia, "What does Nadia paint?")
    assert PAINTING in recall
    assert GREETINGS[2] not in recall  # a greeting of another day, nothing to do with painting

    # The same archive and question for an account without a name: the name is searched for,
    # and the greeting comes in with what she said.
    recall = await ask(runtime, model, unnamed, "What does Nadia paint?")
    assert PAINTING in recall and GREETINGS[2] in recall
