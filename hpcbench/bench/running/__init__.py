"""Running the benchmark matrix: the matrix read, each run planned, submitted and watched, its provenance recorded."""
