"""Ray clusters: check that a Ray GCS answers at an address, and record the cluster.

:func:`check_ray_address` refuses, within seconds, an address where no Ray GCS answers
(``ray.init`` would retry for minutes); :func:`record_cluster` writes the nodes, CPUs
and GPUs of the cluster a run attached to into its out-dir, asked from a child process.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

#: The environment variable through which Ray finds a running cluster.
RAY_ADDRESS_ENV = "RAY_ADDRESS"

#: Seconds a Ray cluster's GCS gets to accept a connection before it is called absent.
RAY_CONNECT_TIMEOUT = 10.0
#: Seconds a Ray cluster's GCS gets to answer one gRPC call once connected.
RAY_HANDSHAKE_TIMEOUT = 5.0
#: The call of the handshake: what ``ray.init`` itself asks a GCS first (Ray's
#: ``NodeInfoGcsService``), with an empty request, valid for every field's default.
GCS_HANDSHAKE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"


def check_ray_address(
    address: str,
    timeout: float = RAY_CONNECT_TIMEOUT,
    handshake_timeout: float = RAY_HANDSHAKE_TIMEOUT,
) -> None:
    """Refuse a Ray cluster address where no Ray GCS answers, within seconds.

    ``ray.init(address=...)`` on an address where nothing listens retries for minutes,
    logging only "Failed to connect to GCS"; where another service listens it hung past
    300 s (a listener that never answers) or failed after ~35 s with Ray's raw
    traceback. So the address must accept a TCP connection within ``timeout`` seconds
    and then answer Ray's own first gRPC call (:data:`GCS_HANDSHAKE_METHOD`) within
    ``handshake_timeout`` seconds; an HTTP server, a silent listener or another gRPC
    service fails. A GCS that asks for Ray's token authentication is let through (Ray
    says what it needs). ``auto`` and ``ray://`` (Ray Client) addresses are left to Ray.

    Raises
    ------
    ValueError
        If ``address`` is not ``host:port``, or no Ray GCS answers there in time (the
        message names the address and what was found there).
    """
    import grpc

    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(
            f"Ray address {address!r} is not host:port (its GCS, as `ray start` prints)"
        )
    refused = f"no Ray cluster answers at {address} (--ray-address or ${RAY_ADDRESS_ENV})"
    advice = "start one with `ray start --head` or give its GCS address"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as error:
        raise ValueError(f"{refused}: {error}; {advice}") from error
    with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
        call = channel.unary_unary(GCS_HANDSHAKE_METHOD)
        try:
            call(b"", timeout=handshake_timeout)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                return
            found = {
                grpc.StatusCode.UNIMPLEMENTED: "a gRPC service that is not a Ray GCS",
                grpc.StatusCode.DEADLINE_EXCEEDED: (
                    f"something that accepts connections but gave no Ray answer within "
                    f"{handshake_timeout:g} s"
                ),
            }.get(code, f"something that does not speak Ray's gRPC ({code.name})")
            raise ValueError(f"{refused}: {found} listens there; {advice}") from None


#: ``ray.init``'s address of a private Ray: started for the run, whatever else runs here.
PRIVATE_RAY = "local"


#: Where a run on an attached Ray cluster records the cluster (in its out-dir).
CLUSTER_FILE = "cluster.json"

_CLUSTER_PROBE = """
import json, sys
import ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n.get("Alive")]
print(json.dumps({
    "address": sys.argv[1],
    "nodes": [{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"],
               "cpus": n["Resources"].get("CPU", 0.0), "gpus": n["Resources"].get("GPU", 0.0)}
              for n in nodes],
    "cpus": sum(n["Resources"].get("CPU", 0.0) for n in nodes),
    "gpus": sum(n["Resources"].get("GPU", 0.0) for n in nodes),
}))
ray.shutdown()
"""


def record_cluster(address: str, path: Path, timeout: float = 120.0) -> str:
    """Write the Ray cluster's nodes, CPUs and GPUs to ``path``; a line saying what it is.

    Asked in a child process (connecting a driver to the cluster, as ``ray status``
    does), so this process never holds a Ray connection. A cluster that cannot be asked
    is recorded as such, with the reason: the run's results stand either way.
    """
    try:
        probe = subprocess.run(
            [sys.executable, "-c", _CLUSTER_PROBE, address],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        cluster = json.loads(probe.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as error:
        cluster = {"address": address, "error": f"could not ask the cluster: {error}"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cluster, indent=2) + "\n", encoding="utf-8")
    if "error" in cluster:
        return f"Ray cluster {address}: {cluster['error']}"
    return (
        f"Ray cluster {address}: {len(cluster['nodes'])} nodes, {cluster['cpus']:g} CPUs, "
        f"{cluster['gpus']:g} GPUs (recorded in {path})"
    )
