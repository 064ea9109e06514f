"""What a model server can do, as far as Modex can tell: tools, JSON mode, window, slots.

Read once per model from the server's own metadata (``OpenAIChatModel.discover``) and kept on
the model as ``capabilities``; the home page, the chat header and the log show it, and the
runtime acts on it:

* **llama.cpp** (``GET /props``): ``chat_template_caps.supports_tool_calls`` says whether the
  loaded chat template can express tool calls (a template that cannot makes llama-server ignore
  ``tools`` without an error), ``default_generation_settings.n_ctx`` the window of a slot,
  ``total_slots`` how many requests it serves at once; it takes ``response_format`` (JSON mode
  and JSON schema, by grammar).
* **vLLM** (``GET /v1/models`` entries owned by ``vllm``): ``max_model_len`` is the window; tools
  depend on how it was started (``--enable-auto-tool-choice``), so they are unknown until a
  request shows otherwise; it takes ``response_format``.
* **Ollama** (``POST /api/show``): ``capabilities`` lists ``tools`` for models that have them;
  it takes ``response_format`` of type ``json_object``. Its window is the server's
  ``OLLAMA_CONTEXT_LENGTH`` / ``num_ctx``, which the API does not report.
* **OpenAI** (``api.openai.com``): tools and JSON mode.
* anything else: unknown (None), said as such.

What a request teaches overrides what the metadata said, for the rest of the process: a server
that refuses ``tools`` or ``response_format`` is marked as not supporting them, and one whose
template refuses the roles gets tool turns folded into text (``agents.llm.shaping``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

LLAMA_CPP = "llama.cpp"
VLLM = "vLLM"
OLLAMA = "Ollama"
OPENAI = "OpenAI"
UNKNOWN_SERVER = "OpenAI-compatible server"
OFFLINE = "built-in offline model"


@dataclass(frozen=True, slots=True)
class Capabilities:
    """One endpoint's model, as detected. ``None`` in ``tools``/``json_mode`` means unknown.

    ``tools_note`` says how ``tools`` is known (or why not); ``window`` is the server's window
    when it reports one; ``slots`` how many requests the server runs at once (llama.cpp);
    ``folds_roles``: the server's template refused tool roles, so tool turns are sent folded
    into alternating user/assistant text (learned from a refusal, for this process).
    """

    server: str
    model: str
    window: int | None = None
    tools: bool | None = None
    tools_note: str = ""
    json_mode: bool | None = None
    slots: int | None = None
    folds_roles: bool = False
    detected: bool = True  # False: the server could not be asked (down, or no metadata at all)

    @property
    def tools_label(self) -> str:
        """"yes", "no" or "unknown", with how it is known."""
        word = {True: "yes", False: "no", None: "unknown"}[self.tools]
        return f"{word} ({self.tools_note})" if self.tools_note else word

    @property
    def json_label(self) -> str:
        return {True: "yes", False: "no", None: "unknown"}[self.json_mode]

    def describe(self) -> str:
        """One line for the log and the pages."""
        window = f"{self.window} tokens" if self.window else "not reported"
        parts = [f"{self.model} on {self.server}", f"window {window}", f"tools {self.tools_label}",
                 f"JSON mode {self.json_label}"]
        if self.slots:
            parts.append(f"{self.slots} slot{'s' if self.slots != 1 else ''}")
        if self.folds_roles:
            parts.append("tool turns folded into text (the chat template requires alternating roles)")
        return ", ".join(parts)

    def learned(self, **changes: Any) -> Capabilities:
        return replace(self, **changes)


def offline_capabilities(name: str) -> Capabilities:
    return Capabilities(server=OFFLINE, model=name, tools=True, tools_note="built in", json_mode=True)


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def from_models_entry(entry: dict[str, Any], *, model: str) -> Capabilities | None:
    """What a ``/v1/models`` entry says; None when it says nothing that identifies the server."""
    owner = str(entry.get("owned_by") or "").lower()
    window = None
    for key in ("max_model_len", "context_length", "context_window", "max_context_length"):
        if window := _positive_int(entry.get(key)):
            break
    if owner == "vllm":
        return Capabilities(server=VLLM, model=model, window=window, tools=None, json_mode=True,
                            tools_note="depends on --enable-auto-tool-choice; not reported")
    if owner in ("library", "ollama"):
        return Capabilities(server=OLLAMA, model=model, window=None, tools=None, json_mode=True,
                            tools_note="not reported")
    if window is not None:
        return Capabilities(server=UNKNOWN_SERVER, model=model, window=window, tools=None,
                            tools_note="not reported")
    return None


def from_props(props: dict[str, Any], *, model: str) -> Capabilities | None:
    """What llama.cpp's ``GET /props`` says (None when ``props`` is not llama-server's)."""
    settings = props.get("default_generation_settings")
    window = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    caps = props.get("chat_template_caps")
    if window is None and not isinstance(caps, dict):
        return None
    tools, note = None, "the server does not report its template's capabilities"
    if isinstance(caps, dict) and ("supports_tool_calls" in caps or "supports_tools" in caps):
        tools = bool(caps.get("supports_tool_calls", caps.get("supports_tools")))
        note = "the chat template " + ("formats tool calls" if tools else "cannot format tool calls")
    return Capabilities(server=LLAMA_CPP, model=model, window=window, tools=tools, tools_note=note,
                        json_mode=True, slots=_positive_int(props.get("total_slots")))


def from_ollama_show(show: dict[str, Any], *, model: str) -> Capabilities | None:
    """What Ollama's ``POST /api/show`` says (None without a ``capabilities`` list)."""
    listed = show.get("capabilities")
    if not isinstance(listed, list):
        return None
    tools = "tools" in listed
    note = "the model " + ("lists tools" if tools else "does not list tools") + " (Ollama /api/show)"
    return Capabilities(server=OLLAMA, model=model, window=None, tools=tools, tools_note=note, json_mode=True)


def for_known_host(host: str, *, model: str) -> Capabilities | None:
    if host == "api.openai.com":
        return Capabilities(server=OPENAI, model=model, tools=True, tools_note="OpenAI", json_mode=True)
    return None
