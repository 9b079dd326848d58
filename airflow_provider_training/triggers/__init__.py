"""Triggers that wait for training jobs in the triggerer."""
