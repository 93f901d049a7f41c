"""`fmctl permissions`: the IAM policy documents the person or role running fmctl needs."""

from __future__ import annotations

import re
from typing import Any

import click

from provisioner.cli.options import output_option


def permissions_json(name: str) -> dict[str, Any]:
    """The policy documents, and the calls each IAM action is for (with their sources)."""
    from provisioner.catalog import permissions as p

    return {
        "policies": [{"name": n, "document": d} for n, d in p.policies(name)],
        "calls": {
            f"{p.prefix(service)}:{operation}": list(p.actions_of(service, operation))
            for service, operations in sorted(p.CALLS.items())
            for operation in operations.split()
        },
        "sources": sorted({also.source for also in p.ALSO}),
    }


#: IAM's policy names: 1 to 128 of ``[\w+=,.@-]`` (botocore's IAM model, policyNameType);
#: room is left for the "-N" suffix.
POLICY_NAME = re.compile(r"[\w+=,.@-]{1,120}", re.ASCII)


def _name_check(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A prefix IAM would refuse as a policy's name stops here, exit 1, with IAM's rule."""
    if not POLICY_NAME.fullmatch(value):
        click.echo(
            f"error: --name: {value!r} cannot name an IAM policy\n"
            "hint: up to 120 of letters, digits and + = , . @ _ - (IAM's rule for policy "
            "names, less room for the -N suffix)",
            err=True,
        )
        ctx.exit(1)
    return value


@click.command("permissions")
@click.option(
    "--name",
    default="fmctl-caller",
    show_default=True,
    callback=_name_check,
    help="Prefix of the policies' names (NAME-1, NAME-2, ...).",
)
@output_option
def permissions(name: str, output: str) -> None:
    """Print the IAM policies that let a person or role run fmctl, and nothing more."""
    data = permissions_json(name)
    if output == "json":
        from provisioner.cli.report import dump_json

        click.echo(dump_json(data))
        return
    policies = data["policies"]
    actions = sum(len(s["Action"]) for p in policies for s in p["document"]["Statement"])
    click.echo(
        f"fmctl's caller needs {len(data['calls'])} API calls: {actions} IAM actions in "
        f"{len(policies)} managed policies (IAM allows 6,144 characters a policy):"
    )
    for policy in policies:
        click.echo(f"\n{policy['name']}:")
        for statement in policy["document"]["Statement"]:
            resource = statement["Resource"]
            where = "any resource" if resource == "*" else "fmctl's own IAM names (fmctl-*)"
            click.echo(f"  {statement['Sid']:<26} {len(statement['Action']):>3} on {where}")
            for op, keys in statement.get("Condition", {}).items():
                for key, values in keys.items():
                    click.echo(f"{'':<33}when {key} {op} {', '.join(values)}")
    click.echo(
        "\nThe documents: `fmctl permissions -o json`, e.g.\n"
        f"  fmctl permissions -o json | jq '.policies[0].document' > {name}-1.json\n"
        f"  aws iam create-policy --policy-name {name}-1 --policy-document file://{name}-1.json\n"
        "Not in them: ParallelCluster's own calls (Slurm on ParallelCluster: attach its user\n"
        "policies) and Kubernetes RBAC (fmctl makes the cluster's creator its administrator)."
    )
