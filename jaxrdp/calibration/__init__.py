"""Vectorized, conservative calibration of noise, steps and sampling rate."""
