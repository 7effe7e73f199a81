"""Grid sweeps: chunked evaluation over devices, tables and plots."""
