"""The one seam between the stacks and the CDK that synthesizes them.

The stacks are written against CDK for Terraform (``cdktf`` and
``cdktf_cdktf_provider_aws``), the default. cdktf was archived by its vendor
in December 2025; CDK Terrain is its maintained fork with the same API under
other module names (``cdktn``, ``cdktn_provider_aws``). With
``TABLECAST_CDK=cdktn`` in the environment, importing ``infra`` makes every
``cdktf`` and ``cdktf_cdktf_provider_aws`` import resolve to CDK Terrain's
modules instead, so the same stacks synthesize on it unchanged. Everything
else imports the CDK's core names from here.

``tests/infra/test_infra_cdk_seam.py`` synthesizes with both and compares.
"""

from cdktf import (  # after the seam, so these are the chosen CDK's
    App,
    Fn,
    LocalBackend,
    S3Backend,
    TerraformOutput,
    TerraformResourceLifecycle,
    TerraformStack,
    Testing,
)

from infra.cdk_seam import CDK

__all__ = [
    "CDK",
    "App",
    "Fn",
    "LocalBackend",
    "S3Backend",
    "TerraformOutput",
    "TerraformResourceLifecycle",
    "TerraformStack",
    "Testing",
]
