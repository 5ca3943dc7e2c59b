"""Page arithmetic, re-exported from engine_adapter/base/pages.py (shared with the engines)."""

from engine_adapter.base.pages import ceil_div, page_ceil, page_floor

__all__ = ["ceil_div", "page_ceil", "page_floor"]
