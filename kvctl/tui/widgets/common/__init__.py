"""common widgets."""
