"""Production settings: `check --deploy` passes, HTTPS by default, and a Content-Security-Policy
that every page actually keeps (no inline script, no inline style attribute).

The deployment settings are read at import, so they are tested in subprocesses with a
production environment; the CSP is tested on the real pages with the test client (a crawl of
the site as a staff user) and, in a real browser, in tests/web/test_csp_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

from agents.chat import service as chat

REPO = Path(__file__).resolve().parents[2]


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What an operator sets: a real key, the host names, nothing else (DEBUG off by default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MODEX_", "DATABASE_URL", "REDIS_URL"))}
    env.update(
        DJANGO_SETTINGS_MODULE="modex_web.settings",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_ALLOWED_HOSTS="modex.example.com",
        MODEX_WORKSPACE=str(tmp_path / "workspace"),
    )
    env.update(extra)
    return env


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )


def settings_of(env: dict[str, str], *names: str) -> dict:
    code = (
        "import json, django; django.setup(); from django.conf import settings; "
        f"print(json.dumps({{n: getattr(settings, n) for n in {list(names)!r}}}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# -- deployment settings ----------------------------------------------------------------------


def test_deploy_check_passes_with_a_production_environment(tmp_path):
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_is_https_only_by_default(tmp_path):
    values = settings_of(
        production_env(tmp_path), "DEBUG", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "SECURE_HSTS_PRELOAD", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_PROXY_SSL_HEADER",
    )
    assert values == {
        "DEBUG": False, "SECURE_SSL_REDIRECT": True, "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True, "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True, "SECURE_PROXY_SSL_HEADER": None,
    }


def test_behind_a_tls_terminating_proxy(tmp_path):
    env = production_env(
        tmp_path, DJANGO_SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto: https", DJANGO_SECURE_SSL_REDIRECT="false"
    )
    values = settings_of(env, "SECURE_PROXY_SSL_HEADER", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE")
    assert values == {
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"], "SECURE_SSL_REDIRECT": False,
        "SESSION_COOKIE_SECURE": True,
    }
    bad = manage("check", env=production_env(tmp_path, DJANGO_SECURE_PROXY_SSL_HEADER="https"))
    assert bad.returncode != 0 and "DJANGO_SECURE_PROXY_SSL_HEADER='https' is not a 'Header-Name: value' pair" in bad.stderr


def test_database_url_and_redis_url_switch_the_engines(tmp_path):
    env = production_env(tmp_path, DATABASE_URL="postgres://modex:pw@db.internal:5432/modex",
                         REDIS_URL="redis://cache.internal:6379/0")
    values = settings_of(env, "DATABASES", "CHANNEL_LAYERS")
    assert values["DATABASES"]["default"]["ENGINE"] == "django.db.backends.postgresql"
    layer = values["CHANNEL_LAYERS"]["default"]
    assert layer["BACKEND"] == "channels_redis.core.RedisChannelLayer"
    [host] = layer["CONFIG"]["hosts"]
    assert host["address"] == "redis://cache.internal:6379/0"
    # The layer blocks 5 s per receive on an idle channel: reads must be allowed longer than that.
    assert host["socket_timeout"] > 5
    assert settings_of(production_env(tmp_path), "CHANNEL_LAYERS")["CHANNEL_LAYERS"]["default"]["BACKEND"] == (
        "channels.layers.InMemoryChannelLayer")


@pytest.mark.parametrize(
    ("extra", "warning"),
    [
        ({"DJANGO_DEBUG": "true"}, "security.W018"),
        ({"DJANGO_ALLOWED_HOSTS": ""}, "security.W020"),
        ({"DJANGO_SECURE": "false"}, "security.W008"),
        ({"DJANGO_SECRET_KEY": "x" * 40}, "security.W009"),
    ],
)
def test_deploy_check_refuses_an_unsafe_environment(tmp_path, extra, warning):
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env(tmp_path, **extra))
    assert result.returncode != 0
    assert warning in result.stdout + result.stderr


def test_https_redirect_and_hsts_when_secure(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = True
    plain = client.get("/accounts/login/")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/accounts/login/"
    secure = client.get("/accounts/login/", secure=True)
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"


def test_a_proxy_header_makes_the_request_secure(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"}).status_code == 200
    assert client.get("/accounts/login/", headers={"X-Forwarded-Proto": "http"}).status_code == 301


# -- the Content-Security-Policy on every page ------------------------------------------------


class _Page(HTMLParser):
    """Links, inline scripts and style attributes/elements of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.inline: list[str] = []
        self._script: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if "style" in values:
            self.inline.append(f"<{tag} style={values['style']!r}>")
        if any(name.startswith("on") for name in values):
            self.inline.append(f"<{tag}> with an on* handler")
        if tag == "style" and "nonce" not in values:
            self.inline.append("<style> element")
        if tag == "script" and "src" not in values and values.get("type") != "application/json":
            self._script = ""
        if tag == "a" and values.get("href"):
            self.links.append(values["href"])

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            if self._script.strip():
                self.inline.append(f"inline <script>: {self._script.strip()[:60]!r}")
            self._script = None


def crawl(client, seeds: list[str], *, limit: int = 80) -> dict[str, _Page]:
    """GET every same-site page reachable from ``seeds`` in two clicks (links only, no forms)."""
    pages: dict[str, _Page] = {}
    frontier = [(seed, 0) for seed in seeds]
    while frontier and len(pages) < limit:
        url, depth = frontier.pop(0)
        path = urlsplit(url).path
        if path in pages or re.search(r"/(logout|delete|revoke)/", path):
            continue
        response = client.get(path)
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        policy = response.get("Content-Security-Policy", "")
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, (path, policy)
        page = _Page()
        page.feed(response.content.decode())
        pages[path] = page
        if depth < 2:
            for link in page.links:
                absolute = urljoin(path, link)
                if urlsplit(absolute).netloc in ("", "testserver") and urlsplit(absolute).path.startswith("/"):
                    frontier.append((urlsplit(absolute).path, depth + 1))
    return pages


@pytest.mark.django_db
def test_every_page_keeps_the_content_security_policy(client, django_user_model):
    staff = django_user_model.objects.create_superuser(username="staff", password="staff-pw-1", email="s@example.test")
    conversation = chat.create_conversation(user=staff, agent=chat.main_agents()[0].name)
    client.force_login(staff)
    seeds = ["/", "/conversations/", f"/conversations/{conversation.pk}/", "/memory/", "/scopes/",
             "/settings/tokens/", "/admin/", "/admin/memory/", "/api/docs"]
    pages = crawl(client, seeds)
    for must in ("/", f"/conversations/{conversation.pk}/", "/scopes/", "/api/docs", "/admin/memory/"):
        assert must in pages, f"{must} was not reached; got {sorted(pages)}"
    assert len(pages) >= 15, sorted(pages)
    offenders = {path: page.inline for path, page in pages.items() if page.inline}
    assert offenders == {}, "inline script or style that the CSP refuses"
    client.logout()
    login = client.get("/accounts/login/")
    page = _Page()
    page.feed(login.content.decode())
    assert page.inline == [] and "Content-Security-Policy" in login
