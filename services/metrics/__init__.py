"""The metrics service: a faust-streaming app that watches commits and compactions."""
