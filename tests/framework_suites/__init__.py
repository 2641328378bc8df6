"""The agent frameworks' own session tests, run against evstore's adapters (see README.md here)."""
