"""PyAV probing and ranged decoding: the only place that imports av."""
