"""Adapters to agent frameworks, one module each; each framework is an optional extra."""
