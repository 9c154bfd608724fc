"""Label sets the operator stamps on its children (the keys live in app.vocab)."""

from __future__ import annotations

from app import vocab


def deployment_selector(deployment: str) -> dict[str, str]:
    """Selects every child of one deployment."""
    return {vocab.LABEL_NAME: vocab.APP_NAME, vocab.LABEL_INSTANCE: deployment}


def role_selector(deployment: str, role: str) -> dict[str, str]:
    """Selects one role's Pods: `kubectl get pods -l ...` in the user's runbook."""
    return {**deployment_selector(deployment), vocab.LABEL_COMPONENT: role}


def common(deployment: str, component: str) -> dict[str, str]:
    return {**deployment_selector(deployment), vocab.LABEL_COMPONENT: component, vocab.LABEL_MANAGED_BY: vocab.MANAGED_BY}


def leader_selector(deployment: str, role: str) -> dict[str, str]:
    """The role Service fronts leaders only: member m0 serves the OpenAI API."""
    return {**role_selector(deployment, role), vocab.LABEL_MEMBER_INDEX: "0"}


def instance_selector(deployment: str, role: str, ordinal: int) -> dict[str, str]:
    return {**role_selector(deployment, role), vocab.LABEL_POD_ORDINAL: str(ordinal)}
