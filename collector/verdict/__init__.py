"""The verdict printed when a recorded script or trainer ends, and the helper process that prepares it beside the job."""
