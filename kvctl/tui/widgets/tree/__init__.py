"""tree widgets."""
