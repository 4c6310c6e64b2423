"""crew's benchmarks: `python -m bench` (or `make bench`) prints a table and writes results.json."""
