"""What every stack of an environment shares: its name, the AWS provider and the state backend."""

from cdktf_cdktf_provider_aws.provider import AwsProvider, AwsProviderDefaultTags
from constructs import Construct

from infra.cdk import CDK, LocalBackend, S3Backend, TerraformStack
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
        settings = config.deployment
        AwsProvider(
            self,
            "aws",
            region=config.region,
            # Stacks of one environment can never be applied to another account.
            allowed_account_ids=[settings.account_id],
            default_tags=[
                AwsProviderDefaultTags(
                    tags={
                        "Project": "tablecast",
                        "Environment": config.name,
                        "Stack": self.stack_name,
                        "ManagedBy": CDK,
                        **config.tags,
                    }
                )
            ],
        )
        backend = settings.state_backend
        if backend is not None:
            S3Backend(
                self,
                bucket=backend.bucket,
                key=f"{backend.key_prefix}/{config.name}/{component}.tfstate",
                region=backend.region or config.region,
                encrypt=True,
            )
            # S3's own lock file (Terraform >= 1.10) stops two applies at
            # once; cdktf 0.21's S3Backend predates the option.
            self.add_override("terraform.backend.s3.use_lockfile", True)
        else:
            # Throwaway only (EnvironmentConfig refuses local state otherwise).
            # cdktf's default is an absolute path of the machine that ran
            # synth; relative to cdktf.out/stacks/<stack>/ it is the checkout's
            # root on any machine, for the backend and the cross-stack reads.
            LocalBackend(self, path=f"../../../terraform.{self.stack_name}.tfstate")
