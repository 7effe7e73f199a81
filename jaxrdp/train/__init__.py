"""DP-SGD training: sampling, clipped noisy gradients, the step with in-loop accounting, checkpoints."""
