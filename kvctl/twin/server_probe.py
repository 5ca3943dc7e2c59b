"""What `--against URL` needs to know about a live SGLang server, read before any request.

    GET /server_info   page_size, max_total_num_tokens, radix_eviction_policy,
                       schedule_policy, chunked_prefill_size, max_running_requests,
                       max_prefill_tokens, context_length, max_req_input_len, model_path,
                       is_embedding, enable_metrics (ServerArgs.resolved_dict plus the
                       scheduler's info: build_server_info in srt/utils/common.py)
    GET /model_info    is_generation (an embedding server takes no generate request)
    vocabulary         `vocab_size` of <model_path>/config.json when kvctl can read it
                       (same machine), else --vocab-size; prompt ids must be below it

Every way this fails is an InputError naming the fix (one line, exit 2), raised before the
first request is sent: a dead server, one that is not SGLang, one that does not generate
from `input_ids`, a vocabulary kvctl cannot learn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine_adapter.remote.http_fetch import Unreachable, http_get, normalize_base_url
from engine_adapter.remote.server_info import MalformedServerInfo, fetch_server_info_document
from kvctl.errors import InputError


@dataclass(frozen=True, kw_only=True)
class ServerProfile:
    """A live server's identity and limits. `info` is its raw /server_info document."""

    url: str
    info: dict
    vocab_size: int
    vocab_source: str  # where vocab_size came from

    @property
    def page_size(self) -> int:
        return int(self.info.get("page_size") or 1)

    @property
    def context_length(self) -> int | None:
        return _positive(self.info.get("context_length"))

    @property
    def max_req_input_len(self) -> int | None:
        return _positive(self.info.get("max_req_input_len"))

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.info.get("enable_metrics"))

    def rejects(self, input_length: int, output_length: int) -> str | None:
        """Why SGLang 0.5.23 refuses this request, or None: the tokenizer manager refuses
        input >= context_length (`_validate_one_request`), and input + max_new_tokens >
        context_length (`validate_total_tokens`, on by default); the scheduler refuses input
        >= max_req_input_len."""
        context = self.context_length
        if context is not None and input_length >= context:
            return f"input {input_length} >= context length {context}"
        if context is not None and self.info.get("validate_total_tokens", True) \
                and input_length + output_length > context:
            return f"input + output {input_length + output_length} > context length {context}"
        limit = self.max_req_input_len
        if limit is not None and input_length >= limit:
            return f"input {input_length} >= max_req_input_len {limit}"
        return None


def probe(url: str, *, vocab_size: int | None = None, timeout_s: float = 10.0) -> ServerProfile:
    """Read the server (module docstring); InputError naming the fix on any failure."""
    base = normalize_base_url(url, what="--against")
    try:
        info, _path = fetch_server_info_document(base, timeout_s=timeout_s)
    except Unreachable as err:
        raise InputError(f"cannot reach the SGLang server at {base} ({err}): start it, or fix "
                         "--against; no request was sent") from None
    except MalformedServerInfo as err:
        raise InputError(f"{base} does not look like an SGLang server ({err}): fix --against; "
                         "no request was sent") from None
    if not isinstance(info, dict) or not isinstance(info.get("page_size", 1), (int, type(None))):
        raise InputError(f"{base}/server_info is not SGLang's server info: fix --against")
    if info.get("is_embedding") or _model_info(base, timeout_s).get("is_generation") is False:
        raise InputError(f"{base} serves an embedding model: it does not generate from "
                         "input_ids; --against needs a generation server")
    size, source = _vocabulary(info, vocab_size)
    return ServerProfile(url=base, info=info, vocab_size=size, vocab_source=source)


def _model_info(base: str, timeout_s: float) -> dict:
    """/model_info (or the deprecated /get_model_info); {} when neither answers JSON."""
    for path in ("/model_info", "/get_model_info"):
        try:
            status, body = http_get(f"{base}{path}", timeout_s=timeout_s)
        except Unreachable:
            return {}
        if status == 200:
            try:
                document = json.loads(body)
            except ValueError:
                return {}
            return document if isinstance(document, dict) else {}
    return {}


def _vocabulary(info: dict, given: int | None) -> tuple[int, str]:
    if given is not None:
        if given < 2:
            raise InputError(f"--vocab-size must be at least 2, got {given}")
        return given, "--vocab-size"
    model_path = info.get("model_path")
    config = Path(str(model_path)) / "config.json" if model_path else None
    if config is not None and config.is_file():
        try:
            document = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            document = {}
        for holder in (document, document.get("text_config") or {}):
            size = _positive(holder.get("vocab_size")) if isinstance(holder, dict) else None
            if size is not None and size >= 2:
                return size, str(config)
    raise InputError(f"cannot learn the server's vocabulary ({model_path}/config.json is not "
                     "readable here): pass --vocab-size N (the model's vocab_size)")


def _positive(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
