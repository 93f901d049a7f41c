"""fmctl's sandbox: a local stand-in for the AWS APIs fmctl calls (moto in server mode, and
shims of its own where moto has none: EKS's Kubernetes API, PCS, Budgets, the Price List,
EventBridge Scheduler, ...), with the states, errors and clocks of the real services, so that
`fmctl up --sandbox` rehearses a cluster on a laptop and the tests prove fmctl against it.

A package of its own, installed with ``fmctl[sandbox]``: the product reaches it only
through its ``fmctl.sandbox`` entry point (``daemon``, the emulator's start, key pair and
stop), and it imports nothing of the product."""
