"""Classical (epsilon, delta)-DP theorems: composition, amplification, tail-bound calibrations."""
