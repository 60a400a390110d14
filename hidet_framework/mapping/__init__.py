"""The task-mapping and layout algebra (the project's central idea) and its lowering
to loops and index arithmetic."""
