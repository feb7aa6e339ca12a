"""The sweep: try DataLoader settings of a user's own factory, choosing each next trial from what was measured."""
