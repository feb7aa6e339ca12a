"""Past one machine: a Prometheus exporter that follows a node's stallwatch files read-only while they are written.

``sources.Exporter`` follows the files, ``tail`` each run incrementally,
``stall`` computes the windowed stall fraction as the diagnosis does,
``metrics`` is the table of served families and ``server`` the HTTP side.
Importing this package starts nothing and imports no prometheus_client.
"""
