"""Causeway's collective library for Python.

``causeway.Communicator`` runs allreduce, broadcast, allgather, reduce-scatter
and barrier on DLPack tensors in place (``tensor.__dlpack__()``), with the GIL
released. Most users want the torch backend instead::

    import causeway.torch  # registers the "causeway" backend
    torch.distributed.init_process_group("causeway")

Errors are typed: ``PeerError`` (a peer died, stopped, or made another call;
``.peer`` names it), ``CausewayTimeoutError`` (also a ``TimeoutError``),
``ConfigError`` (also a ``ValueError``), all ``CausewayError``\\ s (a
``RuntimeError``). Each has ``.peer`` and ``.kind`` (the library's variant).
"""

from causeway._causeway import (
    CausewayError,
    CausewayTimeoutError,
    Communicator,
    ConfigError,
    PeerError,
    StoreServer,
    __version__,
    domain_from_topology,
)

__all__ = [
    "CausewayError",
    "CausewayTimeoutError",
    "Communicator",
    "ConfigError",
    "PeerError",
    "StoreServer",
    "__version__",
    "domain_from_topology",
]
