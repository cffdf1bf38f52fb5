"""Strategies: the protocol, pipeline, triggers, presets and the built-ins."""
