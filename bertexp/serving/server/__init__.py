"""`bertexp serve`: TF Serving's REST and gRPC APIs over exported versions (the [serve] extra)."""
