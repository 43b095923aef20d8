"""§4 and supplementary A (numpy/scipy only): coverage sampling, timing-protocol math, the LUT and its fit, latency metrics."""
