"""The step-cost model file `kvctl calibrate` writes and `kvctl replay --cost-model` reads.

    {"kind": "kvctl-step-cost-model", "format_version": 1, "kvctl_version": "0.1.0",
     "created_at": "2026-12-05T08:30:00+00:00",
     "coefficients": {"intercept": 0.0019, "extend_tokens": 3.5e-05, ...},   seconds per unit
     "units": {"intercept": "s per step", ...},
     "fit": {"samples": 525, "by_kind": {...}, "r2": 0.64, "median_rel_error": 0.145,
             "p90_rel_error": 0.51, "median_rel_error_by_kind": {...}},
     "server": {"url": ..., "plugin_url": ..., "model": ..., "page_size": ..., ...},
     "step_time": "what wall_s measures (engine_adapter/plugin/step_timer.py)"}

`write_model` writes atomically (kvctl/util/atomic.py). `load_cost_model` refuses, with one
line naming the file and the problem (InputError, exit 2): a missing or unreadable file, not
JSON, another kind or format version, a missing, unknown, negative or non-finite
coefficient, all coefficients zero. `fit`, `server` are informational and optional.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine_adapter.embedded.step_cost import TERMS, UNITS, FitQuality, StepCostModel
from kvctl.errors import InputError

KIND = "kvctl-step-cost-model"
FORMAT_VERSION = 1
STEP_TIME = ("seconds of scheduler-thread work per step on a synchronous device (scheduling "
             "round, forward, result processing); on an asynchronous one the interval between "
             "processed steps (engine_adapter/plugin/step_timer.py)")


def model_document(model: StepCostModel, *, server: dict[str, Any] | None = None) -> dict:
    """The file's JSON document for `model`."""
    from kvctl import __version__

    doc: dict[str, Any] = {
        "kind": KIND, "format_version": FORMAT_VERSION, "kvctl_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "coefficients": model.as_dict(), "units": dict(zip(TERMS, UNITS)),
        "step_time": STEP_TIME,
    }
    if model.fit is not None:
        doc["fit"] = {name: getattr(model.fit, name) for name in FitQuality.__dataclass_fields__}
    if server is not None:
        doc["server"] = server
    return doc


def write_model(path: str | Path, model: StepCostModel, *, server: dict | None = None) -> dict:
    """Write the model atomically; returns the document written."""
    from kvctl.util.atomic import write_json

    doc = model_document(model, server=server)
    write_json(path, doc)
    return doc


def read_kvctl_document(path: str | Path, *, where: str, kind: str, version: int,
                        what: str, hint: str) -> dict:
    """A kvctl JSON document of `kind` and `version` at `path` (model files here, step-sample
    files in kvctl/record/steps.py); InputError `"{where}: ..."` naming the problem, `what`
    says what the file should be, `hint` where one comes from."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise InputError(f"{where}: cannot read it ({reason})") from None
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise InputError(f"{where}: not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise InputError(f"{where}: not {what} (kind must be {kind!r}; {hint})")
    if doc.get("format_version") != version:
        raise InputError(f"{where}: format_version {doc.get('format_version')!r}, this kvctl "
                         f"reads {version}")
    return doc


def load_cost_model(path: str | Path) -> StepCostModel:
    """Read and validate a model file; `source` is the file's name (for report labels)."""
    path = Path(path)
    where = f"--cost-model {path}"
    doc = read_kvctl_document(path, where=where, kind=KIND, version=FORMAT_VERSION,
                              what="a kvctl step-cost model", hint="write one with kvctl calibrate")
    return StepCostModel(coefficients=_coefficients(doc.get("coefficients"), where),
                         source=path.name, fit=_fit(doc.get("fit")))


def _coefficients(raw: Any, where: str) -> tuple[float, ...]:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: coefficients must be an object of {', '.join(TERMS)}")
    unknown = sorted(set(raw) - set(TERMS))
    if unknown:
        raise InputError(
            f"{where}: unknown coefficient {unknown[0]!r}; expected {', '.join(TERMS)}")
    values = []
    for term in TERMS:
        if term not in raw:
            raise InputError(f"{where}: coefficient {term!r} is missing")
        value = raw[term]
        if (not isinstance(value, (int, float)) or isinstance(value, bool)
                or not math.isfinite(value) or value < 0):
            raise InputError(f"{where}: coefficient {term}={value!r} must be a finite number >= 0")
        values.append(float(value))
    if not any(values):
        raise InputError(f"{where}: every coefficient is 0: every step would take no time")
    return tuple(values)


def _fit(raw: Any) -> FitQuality | None:
    """The recorded fit quality, if present and well formed (informational only)."""
    try:
        return FitQuality(**{name: raw[name] for name in FitQuality.__dataclass_fields__
                             if name in raw})  # older files lack the time totals
    except (KeyError, TypeError):
        return None
