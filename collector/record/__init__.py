"""The training process: the watch facade, the hot loop, and the monitor thread that drains it."""
