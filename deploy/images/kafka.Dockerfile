# Apache Kafka (KRaft) from the same official jars the local runner takes from Maven
# Central (deploy/images/build.sh puts them in libs/), configured like the official
# `apache/kafka` image: every KAFKA_FOO_BAR variable becomes foo.bar in
# server.properties.
ARG BASE_IMAGE=firn/debian:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY libs /opt/kafka/libs
COPY kafka-entrypoint.sh /opt/kafka/bin/entrypoint.sh
# The local runner's logging: warnings and the "Kafka Server started" line, on stdout.
COPY kafka-log4j2.properties /opt/kafka/config/log4j2.properties
EXPOSE 9092
ENTRYPOINT ["/opt/kafka/bin/entrypoint.sh"]
