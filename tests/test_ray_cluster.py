"""The Ray backend on a fake 2-node cluster (ray.cluster_utils.Cluster): the actor hosts are
placed on both nodes; when one node is removed mid-run, Ray restarts its host on the other, and
the run goes on to its total with a monotone step counter."""
from __future__ import annotations

import os
import time

import pytest

from agents.learning.learner import train
from agents.learning.logger import read_csv
from tests.test_maze_training import config

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

FAST_FAILURE_DETECTION = {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                          "health_check_initial_delay_ms": 0}


@pytest.fixture
def two_nodes():
    assert not ray.is_initialized()
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION})
    worker = cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, configure_logging=False, log_to_driver=False)
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def _host_nodes() -> set[str]:
    """The nodes the bundles of the run's placement group are on."""
    tables = [t for t in ray.util.placement_group_table().values() if t["state"] == "CREATED"]
    return {node for t in tables for node in t["bundles_to_node_id"].values()}


def test_hosts_spread_over_two_nodes_and_survive_the_removal_of_one(two_nodes, tmp_path):
    """The worker node is removed once both hosts have acted; later updates are slowed (up to
    60 s) until the log shows the host restarted, so that the run is still going when it comes back."""
    cluster, worker = two_nodes
    run_dir = str(tmp_path / "run")
    seen: dict[str, object] = {}

    def on_update(step: int, metrics: dict[str, float]) -> None:
        if "removed_at" not in seen and metrics["hosts_up"] == 2:  # both hosts have acted
            seen["nodes"] = _host_nodes()
            cluster.remove_node(worker, allow_graceful=False)  # as a node that crashes or is preempted
            seen["removed_at"], seen["deadline"] = step, time.time() + 60
        elif "removed_at" in seen and metrics["hosts_restarted"] == 0 and time.time() < seen["deadline"]:
            time.sleep(0.2)  # a slow learner while Ray notices the loss and restarts the host

    total = 160 * 300
    result = train(config("lstm", run_dir, "--total_steps", str(total), "--actor.backend", "ray"), on_update)
    assert len(seen["nodes"]) == 2  # one host on each node
    assert result["step"] == total
    rows = read_csv(os.path.join(run_dir, "logs.csv"))
    steps = [r["step"] for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == total  # monotone, to the total
    assert rows[-1]["host_failures"] == rows[-1]["hosts_restarted"] == 1 and rows[-1]["unrolls_lost"] >= 1
    restarted = [r["step"] for r in rows if r["hosts_restarted"] >= 1]
    assert restarted and seen["removed_at"] < restarted[0] < total  # it acted again, and the run went on
    assert rows[-1]["hosts_up"] == 2
