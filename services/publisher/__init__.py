"""The publisher service: publishes every Firn table as an Apache Iceberg table."""
