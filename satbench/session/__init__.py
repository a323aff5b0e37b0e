"""One benchmark session: its config, the child processes it starts, its local Prometheus, the run itself."""
