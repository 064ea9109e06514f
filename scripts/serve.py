"""Run Modex for production: N daphne workers on one address, plus the background task worker.

    .venv/bin/python scripts/serve.py --host 0.0.0.0 --port 8000 --workers 4

(``make serve`` runs scripts/serve.sh, which checks the deployment, migrates and collects the
static files first, then this.) Every worker gets a listening socket of its own, bound to the
same address with SO_REUSEPORT and handed over as ``daphne --fd``: the kernel spreads new
connections over the workers, so no balancer process sits in the path of HTTP or WebSockets.
WebSockets stay on the worker that accepted them; what workers share lives in the database
(sessions, leases: one turn per conversation, one cleanup per session) and, with REDIS_URL,
the channel layer.

A worker that exits is restarted after a short pause (its socket is bound anew); one that
keeps dying (``--max-restarts`` within a minute) stops the whole server with exit status 1.
SIGTERM or SIGINT stops everything: each child gets SIGTERM, then SIGKILL after ``--grace``
seconds. With MODEX_TASKS_BACKEND other than "db", no task worker is started.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APPLICATION = "modex_web.asgi:application"
RESTART_WINDOW = 60.0  # seconds over which --max-restarts is counted
RESTART_PAUSE = 1.0


def listening_socket(host: str, port: int, *, backlog: int = 1024) -> socket.socket:
    """An IPv4 TCP socket bound to (host, port) with SO_REUSEPORT, listening and inheritable."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def address_is_free(host: str, port: int) -> None:
    """Raise OSError if anything listens on (host, port) already.

    Bound without SO_REUSEPORT on purpose: with it, a second Modex (or anything else of ours
    using SO_REUSEPORT) would silently share the port instead of being refused.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


@dataclass
class Child:
    """One supervised process: how to start it, the running process, its recent restarts."""

    name: str
    host: str = ""
    port: int = 0
    command: list[str] = field(default_factory=list)  # for task workers; web workers build theirs
    daphne_args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None
    restarts: deque = field(default_factory=deque)

    @property
    def web(self) -> bool:
        return bool(self.port)

    def start(self) -> None:
        if not self.web:
            self.process = subprocess.Popen(self.command, cwd=REPO)
            return
        sock = listening_socket(self.host, self.port)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "--fd", str(sock.fileno()), *self.daphne_args, APPLICATION],
                cwd=REPO,
                pass_fds=(sock.fileno(),),
            )
        finally:
            sock.close()  # the child has its own copy; ours would keep accepting into a dead queue


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--workers", type=int, default=int(os.environ.get("WORKERS", "2")),
                        help="daphne processes on the address (default 2, or $WORKERS)")
    parser.add_argument("--task-workers", type=int, default=int(os.environ.get("TASK_WORKERS", "2")),
                        help="manage.py db_worker processes (default 2, or $TASK_WORKERS: one for the cleanups ahead "
                        "of need, one for the rest; 0 for none)")
    parser.add_argument("--trusted-proxies", type=int, default=None, metavar="N",
                        help="reverse proxies in front that append to X-Forwarded-For (sets MODEX_TRUSTED_PROXIES "
                             "for the workers; default: the environment's, else 0)")
    parser.add_argument("--proxy-headers", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--access-log", default=None, help="daphne access log file (default: none)")
    parser.add_argument("--max-restarts", type=int, default=5)
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL at shutdown")
    args = parser.parse_args(argv)
    if args.proxy_headers:
        # daphne's --proxy-headers takes the client address from the first X-Forwarded-For
        # entry, which the client writes itself: the sign-in throttle would count whatever
        # address a guesser names. Modex reads the header itself, from the right.
        parser.error("--proxy-headers is not supported: daphne would take the client address from the "
                     "X-Forwarded-For entry the client writes. Pass --trusted-proxies N (or set "
                     "MODEX_TRUSTED_PROXIES=N), N being the number of proxies in front of Modex.")
    if args.trusted_proxies is not None and not 0 <= args.trusted_proxies <= 16:
        parser.error("--trusted-proxies: 0 to 16")
    if not 1 <= args.workers <= 64:
        parser.error("--workers: 1 to 64")
    if not 0 <= args.task_workers <= 16:
        parser.error("--task-workers: 0 to 16")
    if not 0 < args.port < 65536:
        parser.error("--port: 1 to 65535")
    try:
        socket.inet_aton(args.host)
    except OSError:
        # daphne adopts an inherited socket as IPv4 only; for IPv6 put a proxy in front.
        parser.error(f"--host: an IPv4 address such as 127.0.0.1 or 0.0.0.0, not {args.host!r}")
    return args


def build_children(args: argparse.Namespace) -> list[Child]:
    if args.trusted_proxies is not None:
        os.environ["MODEX_TRUSTED_PROXIES"] = str(args.trusted_proxies)  # inherited by every child
    daphne_args = ["--access-log", args.access_log] if args.access_log else ["-v", "0"]
    children = [Child(name=f"web-{i + 1}", host=args.host, port=args.port, daphne_args=daphne_args)
                for i in range(args.workers)]
    if os.environ.get("MODEX_TASKS_BACKEND", "db").strip().lower() == "db":
        # --no-reload: a reloading worker runs in a grandchild that our SIGTERM would orphan.
        command = [sys.executable, "manage.py", "db_worker", "--no-reload", "--interval", "1", "--queue-name"]
        # With two or more, the first runs only the cleanups ahead of need (the next turn waits on
        # them), the others every queue (modex_web/settings.py, TASK_QUEUES).
        count = max(0, args.task_workers)
        queues = ["*"] * count if count < 2 else ["ahead"] + ["*"] * (count - 1)
        children += [Child(name=f"tasks-{i + 1}", command=[*command, queue]) for i, queue in enumerate(queues)]
        if args.task_workers:
            # Queues again (once) a task whose worker died mid-task (agents/task_reaper.py).
            reaper = [sys.executable, "manage.py", "reap_tasks", "--every", "60"]
            children.append(Child(name="reaper", command=reaper))
    return children


def stop(children: list[Child], grace: float) -> None:
    running = [c.process for c in children if c.process is not None and c.process.poll() is None]
    for process in running:
        process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in running:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def supervise(children: list[Child], args: argparse.Namespace) -> int:
    stopping = {"signal": None}

    def on_signal(signum, _frame):
        stopping["signal"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for child in children:
        child.start()
    web = ", ".join(str(c.process.pid) for c in children if c.web)
    tasks = sum(1 for c in children if c.name.startswith("tasks-"))
    print(f"Modex serving on http://{args.host}:{args.port}/ with {args.workers} web worker(s) (pids {web}) "
          f"and {tasks} task worker(s).", flush=True)
    try:
        while stopping["signal"] is None:
            time.sleep(0.2)
            for child in children:
                code = child.process.poll() if child.process else None
                if code is None or stopping["signal"] is not None:
                    continue
                now = time.monotonic()
                while child.restarts and now - child.restarts[0] > RESTART_WINDOW:
                    child.restarts.popleft()
                if len(child.restarts) >= args.max_restarts:
                    print(f"{child.name} exited with {code} {len(child.restarts) + 1} times within "
                          f"{RESTART_WINDOW:.0f} s; stopping.", file=sys.stderr, flush=True)
                    return 1
                child.restarts.append(now)
                print(f"{child.name} (pid {child.process.pid}) exited with {code}; restarting it.",
                      file=sys.stderr, flush=True)
                time.sleep(RESTART_PAUSE)
                child.start()
        return 0
    finally:
        stop(children, args.grace)
        print("Modex stopped.", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "modex_web.settings")
    try:
        address_is_free(args.host, args.port)
    except OSError as exc:
        print(f"cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    return supervise(build_children(args), args)


if __name__ == "__main__":
    sys.exit(main())
