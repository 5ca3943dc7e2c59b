"""pool widgets."""
