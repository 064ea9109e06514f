"""Attacks over HTTP with the real Django test client: form values the handlers must refuse
cleanly, not with a 500 (issue 20)."""

from __future__ import annotations

import pytest
from django.test import Client

from agents.editor.service import load_editor
from tests.agents.test_scope_editor import form_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(staff):
    client = Client(raise_request_exception=False)
    client.force_login(staff)
    return client


# -- D: thresholds that str.isdigit accepts and int refuses ------------------------------------


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "\uff11\uff12", "9" * 5000, "1" * 4301])
def test_d_a_hostile_threshold_is_refused_inline_and_the_file_is_untouched(staff_client, bot_file, value):
    before = bot_file.read_bytes()
    response = staff_client.post("/scopes/", form_for(bot_file, researcher__compression_threshold=value))
    assert response.status_code == 422  # the form again, with the error under the field
    html = response.content.decode()
    assert "Enter a whole number of tokens" in html and 'aria-invalid="true"' in html
    assert bot_file.read_bytes() == before
    assert load_editor(path=bot_file).sha256 == form_for(bot_file)["sha256"]
