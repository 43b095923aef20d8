"""Resumable training loops (supernet, retraining) and distributed helpers."""
