"""The node facts of `milabench.config.nodes`, under the name the remote modules use."""

from milabench.config.nodes import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RDZV_PORT,
    force_ssh_mode,
    get_option,
    main_node,
    node_label,
    node_port,
    remote_nodes,
    runs_locally,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RDZV_PORT",
    "force_ssh_mode",
    "get_option",
    "main_node",
    "node_label",
    "node_port",
    "remote_nodes",
    "runs_locally",
]
