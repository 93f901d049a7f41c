"""Resource kinds: every AWS (and in-cluster) resource fmctl manages, each with typed
parameters and outputs and the verbs read / diff / create / update / delete / find_owned.

One module per AWS area; ``registry.KINDS`` lists them all. Kinds call AWS through
``provisioner.drivers`` and never import anything above them.
"""
