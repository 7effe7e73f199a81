"""Renyi-DP accounting: conversions to (epsilon, delta), the search over orders, the accountant."""
