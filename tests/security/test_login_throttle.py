"""The sign-in throttle under a parallel burst, and the client address behind proxies.

The burst runs real threads, each with its own connection to the real test database, posting to
the real sign-in form at once. The password check is the one Django does; the test's
authentication backend only counts the checks and takes as long as a production password hash
(PBKDF2 takes a few hundred milliseconds), which is what gives a burst room to race.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.contrib.auth.backends import ModelBackend
from django.db import connections
from django.test import Client, RequestFactory

from agents.personal import login

HASH_SECONDS = 0.15


class CountingBackend(ModelBackend):
    """Django's own backend, counting the passwords it checks (each as slow as a real hash)."""

    checked = 0
    lock = threading.Lock()

    def authenticate(self, request, username=None, password=None, **kwargs):
        with CountingBackend.lock:
            CountingBackend.checked += 1
        time.sleep(HASH_SECONDS)
        return super().authenticate(request, username=username, password=password, **kwargs)


def burst(url: str, attempts: list[tuple[str, str]], *, address: str = "203.0.113.9",
          last_after_checks: int = 0) -> list[bool]:
    """Post every (username, password) at once from its own thread; whether each signed in.
    ``last_after_checks``: the last attempt waits until that many passwords are being checked
    (a guesser's last guess, sent while the first ones are still being hashed)."""
    barrier = threading.Barrier(len(attempts))
    results: list[bool | None] = [None] * len(attempts)

    def attempt(i: int, username: str, password: str) -> None:
        try:
            client = Client(REMOTE_ADDR=address)
            barrier.wait(timeout=30)
            if last_after_checks and i == len(attempts) - 1:
                deadline = time.monotonic() + 10
                while CountingBackend.checked < last_after_checks and time.monotonic() < deadline:
                    time.sleep(0.002)
            client.post(url, {"username": username, "password": password, "next": "/"})
            results[i] = "_auth_user_id" in client.session
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=(i, u, p)) for i, (u, p) in enumerate(attempts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert all(r is not None for r in results), "every attempt finished"
    return results  # type: ignore[return-value]


@pytest.fixture
def counting(settings):
    settings.AUTHENTICATION_BACKENDS = [f"{__name__}.CountingBackend"]
    CountingBackend.checked = 0
    return CountingBackend


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_parallel_burst_checks_no_more_passwords_than_the_limit(url, staff, counting, settings):
    """24 attempts at once, the right password last: at most MODEX_LOGIN_MAX_FAILURES (5) are
    checked at all, and the right password, arriving after the limit, does not sign in."""
    limit = settings.MODEX_LOGIN_MAX_FAILURES
    attempts = [("staffer", f"guess-{i}") for i in range(23)] + [("staffer", "staff-pw-1")]
    # The right one goes once the limit's worth of wrong ones are being checked.
    results = burst(url, attempts, last_after_checks=limit)
    assert counting.checked <= limit, f"{counting.checked} passwords checked against a limit of {limit}"
    assert not any(results), "nobody signed in"
    assert login.locked(username="staffer", address="203.0.113.9") is not None
    # And the account stays locked for the right password afterwards.
    client = Client(REMOTE_ADDR="198.51.100.1")
    client.post(url, {"username": "staffer", "password": "staff-pw-1", "next": "/"})
    assert "_auth_user_id" not in client.session
    assert counting.checked <= limit


@pytest.mark.django_db(transaction=True)
def test_a_burst_under_the_limit_lets_the_right_password_in(staff, counting, settings):
    """Reserving is not refusing: three wrong guesses and the right password at once, under a
    limit of five, sign the right one in, and the address gets its reservation back."""
    results = burst("/accounts/login/", [("staffer", "a-1"), ("staffer", "a-2"), ("staffer", "a-3"),
                                         ("staffer", "staff-pw-1")])
    assert results == [False, False, False, True]
    assert counting.checked == 4
    from agents.models import LoginThrottle

    assert LoginThrottle.objects.get(key=login.address_key("203.0.113.9")).failures == 3


# -- the client address behind proxies ---------------------------------------------------------


def request(remote: str = "10.0.0.1", forwarded: str | None = None):
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().post("/accounts/login/", **extra)


def test_without_trusted_proxies_the_forwarded_header_is_ignored(settings):
    settings.MODEX_TRUSTED_PROXIES = 0
    assert login.client_address(request("10.0.0.1", "1.2.3.4")) == "10.0.0.1"


@pytest.mark.parametrize(("trusted", "forwarded", "expected"), [
    (1, "198.51.100.7", "198.51.100.7"),  # one proxy: the entry it appended
    (1, "6.6.6.6, 198.51.100.7", "198.51.100.7"),  # the client's own entry on the left is ignored
    (1, "6.6.6.6,7.7.7.7 , 198.51.100.7", "198.51.100.7"),
    (2, "6.6.6.6, 198.51.100.7, 10.0.0.2", "198.51.100.7"),  # two proxies: second from the right
    (2, "198.51.100.7", "198.51.100.7"),  # a shorter chain: its leftmost entry
    (1, "", "10.0.0.1"),  # no entry: the socket's peer
    (1, "not-an-address", "10.0.0.1"),
    (1, "2001:db8::1", "2001:db8::1"),
])
def test_behind_trusted_proxies_the_address_is_read_from_the_right(settings, trusted, forwarded, expected):
    settings.MODEX_TRUSTED_PROXIES = trusted
    assert login.client_address(request("10.0.0.1", forwarded)) == expected


@pytest.mark.django_db
def test_a_client_cannot_dodge_the_address_limit_or_frame_a_victim_with_the_header(settings, django_user_model):
    """Behind one proxy, a client that writes a fresh X-Forwarded-For entry for every guess is
    still counted under the address the proxy saw, and the address it names is not locked."""
    settings.MODEX_TRUSTED_PROXIES = 1
    settings.MODEX_LOGIN_MAX_FAILURES_PER_ADDRESS = 10
    django_user_model.objects.create_user(username="victim", password="victim-pw-1")
    attacker = Client(REMOTE_ADDR="10.0.0.2")  # the proxy
    for i in range(45):
        attacker.post("/accounts/login/", {"username": f"user{i}", "password": "x"},
                      HTTP_X_FORWARDED_FOR=f"192.0.2.{i}, 203.0.113.66")
    assert login.locked(username="nobody", address="203.0.113.66") is not None, "the attacker's address is locked"
    victim = Client(REMOTE_ADDR="10.0.0.2")
    victim.post("/accounts/login/", {"username": "victim", "password": "victim-pw-1"},
                HTTP_X_FORWARDED_FOR="192.0.2.3")  # an address the attacker wrote into its header
    assert "_auth_user_id" in victim.session


# -- make serve ---------------------------------------------------------------------------------


def _serve_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "serve.py"
    spec = importlib.util.spec_from_file_location("modex_serve_script", path)
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_serve_never_lets_daphne_read_the_forwarded_header(monkeypatch, capsys):
    """daphne's --proxy-headers trusts the leftmost X-Forwarded-For entry (the client's own):
    the launcher refuses it and passes the proxy count to the workers instead."""
    serve = _serve_module()
    with pytest.raises(SystemExit):
        serve.parse_args(["--proxy-headers"])
    assert "--trusted-proxies" in capsys.readouterr().err
    monkeypatch.setenv("MODEX_TRUSTED_PROXIES", "0")  # restored after the test
    children = serve.build_children(serve.parse_args(["--trusted-proxies", "2", "--task-workers", "0"]))
    assert children and all("--proxy-headers" not in c.daphne_args for c in children)
    assert not [c for c in children if c.command and "db_worker" in c.command]  # 0: no task worker at all
    import os

    assert os.environ["MODEX_TRUSTED_PROXIES"] == "2"
