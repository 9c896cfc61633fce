"""The local Kafka runner's pure parts."""

from __future__ import annotations

import base64

from firn_localstack.kafka import cluster_id


def test_cluster_ids_are_16_bytes_and_never_look_like_an_option() -> None:
    ids = [cluster_id() for _ in range(2000)]  # about 31 would start with '-' by chance
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
