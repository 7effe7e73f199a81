"""Privacy curves of mechanisms: the SGM's Renyi DP, its closed-form bound, other mechanisms' RDP, one-step hockey-stick curves."""
