"""What the writer samples beside the run: NVML (the only pynvml import), the host (the only psutil import)."""
