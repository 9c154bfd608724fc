"""The activator: the data plane of parking and waking (docs/scale-to-zero.md#the-activator).

It holds the requests sent to a parked or waking deployment's endpoint, asks for a wake (one
annotation on the deployment's scaler, bounded in rate), and forwards the held requests once a
serving replica is Ready. It never plans and never renders: where the endpoint points is the sync
hook's decision, rendered as a child (docs/scale-to-zero.md#the-endpoint-switch).
"""
