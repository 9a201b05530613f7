"""CDK for Terraform stacks that provision tablecast on AWS, one set per environment.

``infra.main`` is the entry point (``cdktf.json`` runs it); ``infra.config``
holds the typed per-environment configuration; ``infra.stacks`` one module per
stack; ``infra.constructs`` the small reusable pieces the stacks share.
"""

# First: with TABLECAST_CDK=cdktn, every cdktf import resolves to CDK Terrain.
from infra import cdk_seam as _seam  # noqa: F401
