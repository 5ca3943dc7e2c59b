"""The routing policies by name, with their options validated (one line, exit 2).

    make_policy("cache_aware", replicas=4, options={"cache_threshold": 0.5}, seed=0)

SGLang's router's policies (`round_robin`, `random`, `power_of_two`, `cache_aware`) mirror
sglang-router 0.3.2 (sglang_policies.py, docs/fleet-router.md); `affinity` is seed 003's
figure 7 (affinity.py); `oracle` reads the replicas' exact caches (oracle.py).
"""

from __future__ import annotations

from kvctl.errors import InputError
from kvctl.fleet.routers.base import RouterPolicy

SGLANG_POLICIES = ("round_robin", "random", "power_of_two", "cache_aware")
POLICIES = (*SGLANG_POLICIES, "affinity", "oracle")
# options each policy takes (CLI flag spelling: --cache-threshold etc.)
OPTIONS = {
    "cache_aware": ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold",
                    "eviction_interval_s", "max_tree_size", "request_text"),
    "affinity": ("mu", "gamma"),
}


# options whose CLI flag is not their name spelled out
FLAGS = {"request_text": "--request-form"}
REQUEST_FORMS = ("text", "input_ids")


def check_policy(name: str) -> str:
    if name not in POLICIES:
        raise InputError(f"unknown router policy {name!r}; valid: {', '.join(POLICIES)}")
    return name


def make_policy(name: str, *, replicas: int, options: dict | None = None,
                seed: int = 0) -> RouterPolicy:
    """A fresh policy for a fleet of `replicas`. InputError: an unknown name, an option the
    policy does not take, a value out of range."""
    check_policy(name)
    options = {k: v for k, v in (options or {}).items() if v is not None}
    form = options.get("request_text")
    if form is not None and form not in REQUEST_FORMS:
        raise InputError(f"--request-form must be one of {', '.join(REQUEST_FORMS)}, "
                         f"got {form!r}")
    allowed = OPTIONS.get(name, ())
    stray = sorted(set(options) - set(allowed))
    if stray:
        flags = ", ".join(FLAGS.get(k, "--" + k.replace("_", "-")) for k in stray)
        raise InputError(f"{flags} does not apply to router {name}")
    if name == "affinity":
        from kvctl.fleet.routers.affinity import Affinity

        return Affinity(replicas, seed=seed, **options)
    if name == "oracle":
        from kvctl.fleet.routers.oracle import Oracle

        return Oracle()
    from kvctl.fleet.routers import sglang_policies as sp

    if name == "round_robin":
        return sp.RoundRobin()
    if name == "random":
        return sp.Random(seed=seed)
    if name == "power_of_two":
        return sp.PowerOfTwo(seed=seed)
    return sp.CacheAware(**options)
