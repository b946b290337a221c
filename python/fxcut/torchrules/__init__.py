"""What fxcut copies of torch's behaviour, release by release.

``versions`` (the table of what differs between supported torch releases,
and the private torch names fxcut relies on), ``ops`` (facts about op
targets and values, as torch's partitioner reads them), ``prepare`` (torch's
dead-code elimination and CSE, planned), ``extract`` (the forward and
backward modules, as torch's extraction builds them), ``codegen`` (their
Python code, as torch.fx writes it), ``snapshot`` (a module put back exactly
as it was), ``gate`` (the compatibility gate: the private names checked once
per process, a copy that fails made a gap torch's partitioner takes).

The bottom layer: it imports only the C extension, and only it reaches into
torch's private names.
"""
