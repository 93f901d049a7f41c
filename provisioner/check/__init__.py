"""`fmctl check`: is every node of a cluster fit for a training run? Parsers for what the
node tools print (``outputs``), verdicts against the catalog (``judge``), and the layout of a
results folder gathered on the nodes (``results``)."""
