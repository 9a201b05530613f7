"""Small reusable pieces the stacks are built from."""

from infra.constructs.alarms import TopicAlarms
from infra.constructs.encryption_key import EncryptionKey
from infra.constructs.secure_bucket import SecureBucket, Tiering
from infra.constructs.spark_node import SparkNode
from infra.constructs.user_data import NodeRole, node_user_data

__all__ = [
    "EncryptionKey",
    "NodeRole",
    "SecureBucket",
    "SparkNode",
    "Tiering",
    "TopicAlarms",
    "node_user_data",
]
