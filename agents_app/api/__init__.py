"""The REST API of sessions and runs (DRF views over the services)."""
