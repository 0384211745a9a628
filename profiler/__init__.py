"""Trial-run profiling and job history; owns the SQL store that the advisor trains from."""
