import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_home_requires_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_home_renders_after_login(client, django_user_model):
    from agents.models import Conversation

    user = django_user_model.objects.create_user(username="ada", password="pw-for-tests-1")
    other = django_user_model.objects.create_user(username="eve", password="pw-for-tests-2")
    Conversation.objects.create(owner=user, agent="default", title="Ada's trip plans")
    Conversation.objects.create(owner=other, agent="default", title="Eve's secret")
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "ada" in page
    # Every main agent people talk to; the reviewer works behind the scenes (chat: false).
    assert "Chat with default" in page and "Chat with reviewer" not in page
    assert "Ada&#x27;s trip plans" in page
    assert "secret" not in page  # one user never sees another's conversations


@pytest.mark.django_db
def test_login_page_and_login_flow(client, django_user_model):
    django_user_model.objects.create_user(username="ada", password="pw-for-tests-1")
    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "ada", "password": "pw-for-tests-1"})
    assert response.status_code == 302 and response["Location"] == reverse("home")
    bad = client.post(reverse("login"), {"username": "ada", "password": "wrong"})
    assert b"didn&#x27;t match" in bad.content or b"didn't match" in bad.content


@pytest.mark.django_db
def test_api_health_and_docs(client, django_user_model):
    assert client.get("/api/health").json() == {"status": "ok"}
    # The docs and the schema are for callers of the API: signed in (or a token) first.
    docs = client.get("/api/docs")
    assert docs.status_code == 302 and docs["Location"].startswith(reverse("login"))
    assert client.get("/api/openapi.json").status_code == 401
    client.force_login(django_user_model.objects.create_user(username="reader", password="pw-for-tests-1"))
    assert client.get("/api/docs").status_code == 200
    schema = client.get("/api/openapi.json").json()
    assert schema["info"]["title"] == "Modex API"


@pytest.mark.django_db
def test_admin_requires_staff(client, django_user_model):
    user = django_user_model.objects.create_user(username="bob", password="pw-for-tests-1")
    client.force_login(user)
    assert client.get("/admin/").status_code == 302


@pytest.mark.django_db
def test_ensure_login_creates_one_superuser_and_prints_the_password_once(django_user_model, capsys):
    call_command("ensure_login")
    first = capsys.readouterr().out
    assert "password:" in first
    password = first.split("password:")[1].split()[0]
    admin = django_user_model.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(password)
    call_command("ensure_login")
    second = capsys.readouterr().out
    assert "password:" not in second and "changepassword admin" in second
    assert django_user_model.objects.filter(is_superuser=True).count() == 1


def test_manage_check_is_clean(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "true", "MODEX_WORKSPACE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_settings_refuse_to_boot_on_a_bad_value(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "perhaps", "MODEX_WORKSPACE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "DJANGO_DEBUG='perhaps' is not a boolean" in result.stderr


def test_commands_as_the_readme_writes_them(tmp_path):
    """`make manage ARGS=...` runs a command on the local defaults; a bare manage.py without
    production settings names what is missing in one message, not a traceback."""
    import os
    import subprocess

    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MODEX_"))}
    env["MODEX_WORKSPACE"] = str(tmp_path / "workspace")
    made = subprocess.run(["make", "-s", "manage", "ARGS=dream --help"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "usage: manage.py dream" in made.stdout
    bare = subprocess.run([str(repo / ".venv" / "bin" / "python"), "manage.py", "dream"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode == 1
    assert "DJANGO_SECRET_KEY is not set" in bare.stderr and 'make manage ARGS="dream"' in bare.stderr
    assert "Traceback" not in bare.stderr


@pytest.mark.django_db
def test_the_login_hint_names_a_command_that_makes_an_account(client, tmp_path):
    """The sign-in page's hint is the command a fresh clone can run as written (a bare
    ``python manage.py`` expects production settings and refuses)."""
    import os
    import re

    hint = client.get(reverse("login")).content.decode()
    [command] = re.findall(r'<code>make manage ARGS=(?:"|&quot;)(createsuperuser)(?:"|&quot;)</code>', hint)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MODEX_"))}
    env.update(MODEX_WORKSPACE=str(tmp_path / "workspace"), DJANGO_SUPERUSER_PASSWORD="pw-for-tests-1-long")
    for args in ("migrate --noinput", f"{command} --noinput --username newcomer --email n@example.com"):
        made = subprocess.run(["make", "-s", "manage", f"ARGS={args}"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr
    assert "Superuser created successfully" in made.stdout
