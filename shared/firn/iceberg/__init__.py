"""Publishing Firn tables as Apache Iceberg tables (format v2) that other engines read.

``names`` maps a Firn table name to an Iceberg identifier; ``translate`` its schema,
partitions and files to Iceberg's; ``writing`` writes position delete files and
manifests; ``pointers`` keeps the SQL catalog's rows in Firn's Postgres; ``publisher``
puts them together into one atomic publication; ``properties`` tells readers how to
reach the catalog.
"""
