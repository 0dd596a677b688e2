"""The HTTP API beyond static files: the model registry and training permits."""
