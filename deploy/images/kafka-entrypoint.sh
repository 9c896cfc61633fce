#!/bin/bash
# server.properties from the environment (KAFKA_FOO_BAR -> foo.bar; as in apache/kafka,
# "___" stands for "-" and "__" for "_"), storage formatted on first start with
# CLUSTER_ID, then the broker in the foreground, logging to stdout.
set -euo pipefail
config=/opt/kafka/config/server.properties
: > "$config"
while IFS='=' read -r name value; do
    case "$name" in
        KAFKA_HEAP_OPTS|KAFKA_OPTS) continue ;;
        KAFKA_*)
            key=${name#KAFKA_}
            key=${key//___/-}
            key=${key//__/@}
            key=${key//_/.}
            key=${key//@/_}
            echo "${key,,}=${value}" >> "$config"
            ;;
    esac
done < <(env)
grep -q '^log.dirs=' "$config" || echo "log.dirs=/var/lib/kafka/data" >> "$config"
classpath="/opt/kafka/libs/*"
java -cp "$classpath" kafka.tools.StorageTool format --ignore-formatted \
    -t "${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}" -c "$config" > /dev/null
exec java ${KAFKA_HEAP_OPTS:--Xmx512m -Xms512m} ${KAFKA_OPTS:-} \
    -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
    -cp "$classpath" kafka.Kafka "$config"
