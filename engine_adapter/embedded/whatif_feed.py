"""Feeds the embedded engine's what-if shadow (engine_adapter/instrument/whatif.py).

Each request enters the shadow once, when the funnel records it (its hit is then final:
at its prefill, or when its host-tier reload completes), with its prompt (from Mooncake
block ids when it has them), its namespace (SGLang's tree never shares across them), its
planned output length (inserted with it: the shadow has no clock) and the hit SGLang
gave it, so the snapshot carries the estimate and the measured 1x figure side by side.
"""

from __future__ import annotations

from engine_adapter.instrument.whatif import WhatIfShadow

_WHATIF_SALT = 0x6B7663746C5F7769  # fixed per kvctl version


def attach_whatif(st) -> WhatIfShadow:
    """Create the shadow for `st`'s pool and register it on the funnel recorder."""
    config = st.config
    # Salted from the engine's seed: a run is reproducible for a seed (the keys never
    # leave the process either way)
    shadow = WhatIfShadow(pool_tokens=config.pool_tokens, page_size=config.page_size,
                          rate=config.whatif_rate, seed=_WHATIF_SALT ^ config.seed)

    def observe(tracked) -> None:
        spec = tracked.spec
        shadow.observe_tokens(tracked.req.origin_input_ids, block_ids=spec.block_ids,
                              namespace=tracked.namespace_label,
                              output_tokens=spec.max_new_tokens,
                              cached_tokens=tracked.facts.s_runtime)

    st.whatif = shadow
    st.funnel.observers.append(observe)
    return shadow
