"""Private building blocks: float64 scope, stable numerics, argument validation, solvers."""
