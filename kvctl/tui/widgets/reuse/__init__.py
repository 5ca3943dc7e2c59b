"""reuse widgets."""
