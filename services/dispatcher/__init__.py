"""The executor-dispatcher service: claims plan tasks and runs them as Spark jobs."""
