"""What operators see of the runtime: Prometheus metrics (`metrics`, served by `views`) and
OpenTelemetry traces (`tracing`)."""
