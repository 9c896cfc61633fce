-- Publication as Apache Iceberg tables (firn.iceberg). The first two tables are the
-- layout of Iceberg's SQL/JDBC catalog (pyiceberg's SqlCatalog, Java's JdbcCatalog
-- with schema version V1), so those catalogs read the published tables straight from
-- Firn's database; the publisher moves metadata_location with a compare-and-set.
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name               varchar(255) NOT NULL,
    table_namespace            varchar(255) NOT NULL,
    table_name                 varchar(255) NOT NULL,
    metadata_location          varchar(1000),
    previous_metadata_location varchar(1000),
    iceberg_type               varchar(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name   varchar(255) NOT NULL,
    namespace      varchar(255) NOT NULL,
    property_key   varchar(255) NOT NULL,
    property_value varchar(1000),
    PRIMARY KEY (catalog_name, namespace, property_key)
);
-- What Firn last published per table, written in the transaction that moves the
-- pointer above: a pointer that differs from it was moved by someone else.
CREATE TABLE iceberg_publication (
    table_id          bigint PRIMARY KEY REFERENCES catalog_table ON DELETE CASCADE,
    catalog_name      text NOT NULL,
    namespace         text NOT NULL,
    iceberg_name      text NOT NULL,
    metadata_location text,                 -- NULL: never published (last_error says why)
    firn_snapshot     bigint NOT NULL DEFAULT 0,
    published_at      timestamptz,
    last_error        text,
    error_at          timestamptz
);
-- Every retained published Iceberg snapshot and the Firn snapshot it shows. Firn's
-- retention keeps the Firn snapshots named here readable (and so their files); the
-- publisher deletes a row in the transaction that expires its Iceberg snapshot.
CREATE TABLE iceberg_snapshot (
    table_id            bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    iceberg_snapshot_id bigint NOT NULL,
    firn_snapshot       bigint NOT NULL,
    sequence_number     bigint NOT NULL,
    committed_at        timestamptz NOT NULL,  -- when the Firn snapshot was committed
    published_at        timestamptz NOT NULL,
    PRIMARY KEY (table_id, iceberg_snapshot_id)
);
CREATE INDEX iceberg_snapshot_firn ON iceberg_snapshot (table_id, firn_snapshot);
CREATE INDEX iceberg_snapshot_published ON iceberg_snapshot (published_at);
-- Files the publisher wrote (position deletes, manifests, manifest lists, metadata)
-- and the greatest Iceberg sequence number whose snapshot uses each: once every
-- snapshot at or below it has expired, nothing retained reads the file.
CREATE TABLE iceberg_file (
    table_id      bigint NOT NULL REFERENCES catalog_table ON DELETE CASCADE,
    path          text NOT NULL,            -- relative to the table's location
    last_sequence bigint NOT NULL,
    owner         text,                     -- a delete file's newest delete manifest
    PRIMARY KEY (table_id, path)
);
CREATE INDEX iceberg_file_last ON iceberg_file (table_id, last_sequence);
CREATE INDEX iceberg_file_owner ON iceberg_file (table_id, owner) WHERE owner IS NOT NULL;
