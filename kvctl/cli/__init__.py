"""The command-line edge: commands parse options, call a function, render its result."""
