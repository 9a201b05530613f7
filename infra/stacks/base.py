"""What every stack of an environment shares: its name, the AWS provider and the state backend."""

from cdktf import LocalBackend, S3Backend, TerraformStack
from cdktf_cdktf_provider_aws.provider import AwsProvider, AwsProviderDefaultTags
from constructs import Construct

from infra.config import EnvironmentConfig


class EnvironmentStack(TerraformStack):
    """A stack named ``tablecast-<env>-<component>``, so each environment deploys alone."""

    def __init__(self, scope: Construct, *, config: EnvironmentConfig, component: str) -> None:
        """Create the stack with its provider and backend.

        :param config: the environment.
        :param component: what the stack holds, e.g. ``"network"``.
        """
        self.stack_name = config.stack_name(component)
        super().__init__(scope, self.stack_name)
        self.config = config
        AwsProvider(
            self,
            "aws",
            region=config.region,
            default_tags=[
                AwsProviderDefaultTags(
                    tags={
                        "Project": "tablecast",
                        "Environment": config.name,
                        "Stack": self.stack_name,
                        "ManagedBy": "cdktf",
                    }
                )
            ],
        )
        if config.state_bucket is not None:
            S3Backend(
                self,
                bucket=config.state_bucket,
                key=f"tablecast/{config.name}/{component}.tfstate",
                region=config.region,
                encrypt=True,
            )
            # Terraform >= 1.10 locks with a lock file next to the state;
            # cdktf 0.21's S3Backend predates the option.
            self.add_override("terraform.backend.s3.use_lockfile", True)
        else:
            # cdktf's default is an absolute path of the machine that ran
            # synth; relative to cdktf.out/stacks/<stack>/ it is the checkout's
            # root on any machine, for the backend and the cross-stack reads.
            LocalBackend(self, path=f"../../../terraform.{self.stack_name}.tfstate")
