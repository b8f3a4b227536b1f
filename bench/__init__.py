"""Scripts that print measured numbers; ``bench.throughput_model`` is also imported by the driver's
``bench`` command."""
