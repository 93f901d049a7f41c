"""The cluster's budget (``cost.budget``): an AWS Budgets budget over what carries the
cluster's tag, telling the spec's addresses at 80% and 100% of the limit
(``resources.budgets``); with ``actions: stop``, also the chain that scales the cluster to
zero at the limit, kept by AWS alone:

    budget (100%) -> SNS topic (encrypted with a key Budgets may use; only Budgets may
    publish) -> Lambda function (``templates/functions/budget_stop.py``) -> the same calls
    as the ttl's schedules (``blueprint.expiry.stop_calls``), as a role allowed only those.

Budgets' own actions cannot do this: their kinds are an IAM policy, an SCP, or an SSM
document that stops EC2 or RDS instances (the API's ActionType), and a stopped instance of
a node group or a Slurm fleet is relaunched by its controller. An IAM deny of launching is
not applied either: the roles that launch the cluster's instances are the services'
service-linked roles (EKS node groups' Auto Scaling, PCS), whose policies cannot be changed.
"""

from __future__ import annotations

from provisioner.blueprint.expiry import stop_calls
from provisioner.blueprint.infra import Parts
from provisioner.resources.budgets import Budget, BudgetParams, budget_name
from provisioner.resources.functions import Function, FunctionParams, log_group
from provisioner.resources.iam import RoleOut
from provisioner.resources.kms import KmsKey, KmsOut, KmsParams
from provisioner.resources.topics import Topic, TopicOut, TopicParams

RID = "budget"
KEY, TOPIC, ROLE, FUNCTION = "kms/budget", "budget/topic", "iam/budget-stop", "budget/stop"
PRINCIPAL = "budgets.amazonaws.com"


def _stop(p: Parts) -> str | None:
    """Plan the stop chain; the topic's logical id, or None when nothing can be stopped."""
    calls, statements = stop_calls(p)
    if not calls:
        return None
    name = f"fmctl-{p.c.name}-budget-stop"
    logs = f"arn:aws:logs:{p.c.region}:*:log-group:{log_group(name)}:*"
    statements = [
        *statements,
        {
            "Sid": "OwnLog",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [logs],
        },
    ]
    p.role(ROLE, "budget-stop", inline={"Version": "2012-10-17", "Statement": statements})
    p.add(
        KEY,
        KmsKey,
        KmsParams(f"fmctl {p.c.name}: the budget's SNS topic", p.tags(KEY), PRINCIPAL),
    )
    p.add(
        TOPIC,
        Topic,
        TopicParams(f"fmctl-{p.c.name}-budget", PRINCIPAL, p.ref(KEY, KmsOut), p.tags(TOPIC)),
    )
    p.add(
        FUNCTION,
        Function,
        FunctionParams(
            name, p.ref(ROLE, RoleOut), p.ref(TOPIC, TopicOut), tuple(calls), p.tags(FUNCTION)
        ),
        code="cost.budget.actions",
    )
    return TOPIC


def budget(p: Parts) -> None:
    """Plan the budget, when the spec has one."""
    wanted = p.spec.cost.budget
    limit = wanted.limit() if wanted is not None else None
    if wanted is None or limit is None:
        return
    topic = _stop(p) if wanted.actions == "stop" else None
    p.add(
        RID,
        Budget,
        BudgetParams(
            budget_name(p.c.name, p.c.region),
            float(limit),
            "monthly" if wanted.monthly is not None else "total",
            tuple(wanted.notify),
            p.ref(topic, TopicOut) if topic else None,
            p.global_tags(RID),
        ),
        limit="cost.budget",
        time_unit="cost.budget",
        notices="cost.budget.notify",
    )
