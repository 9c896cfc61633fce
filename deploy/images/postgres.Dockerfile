# Postgres from Debian's package, configured by the same environment as the official
# `postgres` image (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB), so that
# docker-compose.yml and testcontainers take either one.
ARG BASE_IMAGE=firn/debian:bookworm
FROM ${BASE_IMAGE}
# uid and gid 999, as in the official image: docker-compose.yml's certs job gives the
# server's TLS key to that uid, which either image then runs as.
RUN groupadd --system --gid 999 postgres \
 && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql postgres \
 && apt-get update \
 && apt-get install -y --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PGDATA=/var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
