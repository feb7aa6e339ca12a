"""The writer process: the wire contract (frames), the child that writes SQLite, and the monitor's link to it."""
