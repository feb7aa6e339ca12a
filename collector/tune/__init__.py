"""Live tuning: trials of the prediction model's advice on the running job, kept where they measure faster."""
