"""A run's steps on a worker: the executor (claim, model, tools, commit), the tool calls of one
step, the watcher that renews leases and looks for interrupts, and the recovery sweep."""
