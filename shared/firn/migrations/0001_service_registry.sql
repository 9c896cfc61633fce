-- Every running service process registers here and refreshes last_seen while it is
-- alive, so `firn up`, `firn status` and operators can see which processes are
-- connected to the catalog.
CREATE TABLE service_instance (
    instance_id   text PRIMARY KEY,
    service       text NOT NULL,
    host          text NOT NULL,
    pid           integer NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen     timestamptz NOT NULL DEFAULT now(),
    stopped_at    timestamptz
);

CREATE INDEX service_instance_live ON service_instance (service, last_seen)
    WHERE stopped_at IS NULL;
