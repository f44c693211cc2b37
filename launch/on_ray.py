"""Launched jobs on a Ray cluster, through its Jobs API (ray.job_submission.JobSubmissionClient, the dashboard's
address, e.g. http://ray-head:8265): the scheduler calls of launch/remote.py's RemoteExecutor.

- submit: `submit_job` with the argv joined safely as the entrypoint (shlex.join: Ray runs it with a shell), the
  submission id Yardstick chose, `runtime_env.env_vars` holding the run's variables (its MLflow run and scoped token,
  YARDSTICK_JOB_ID, the recipe's own; every worker process of the Ray job inherits them, so each node's agent finds
  the job's GPU holders by YARDSTICK_JOB_ID) and RAY_JOB_STOP_WAIT_TIME_S (the recipe's second grace: Ray's time
  between SIGTERM and SIGKILL on a stop), the recipe's `working_dir`, `entrypoint_num_gpus` / `entrypoint_num_cpus`
  from its devices, and metadata naming the Yardstick job;
- state: `get_job_info` (its status and message; a 404 is a job the cluster does not know), and where it runs: its
  driver's node (`driver_node_id`, named and addressed by the state API's node list, read once per node) as the
  allocation, with its start and end (the entrypoint's GPUs and CPUs: the recipe's, where Ray does not say), which the follower ties to the Yardstick
  node an agent measures there (launch/remote.py);
- log: the driver's log file through the log API (as written: a progress bar's carriage returns kept), else
  `get_job_logs`; cancel: `stop_job`; nodes: the state API's node list.

Every call is bounded (REQUEST_TIMEOUT_S): a cluster that hangs is unreachable, not a follower stuck.
"""

import threading
from datetime import datetime, timezone
from urllib.parse import urlsplit

from launch.executor import signal_name
from launch.remote import Refused, RemoteExecutor, RemoteNode, RemoteState, Unreachable

REQUEST_TIMEOUT_S = 10
# Ray's error_type of a job whose entrypoint exited non-zero (or was killed): the run's own failure.
ENTRYPOINT_FAILED = "JOB_ENTRYPOINT_COMMAND_ERROR"
_clients = {}
_driver_nodes = {}  # submission id -> the id of the Ray node its driver runs on, from `state` to the `log` after it
_node_names = {}  # Ray node id -> (its name, its IP), as the state API listed it (a node keeps both; one entry a node)
_lock = threading.Lock()


def _client_class():
    from ray.job_submission import JobSubmissionClient

    class Client(JobSubmissionClient):
        # The SDK's requests carry no timeout of their own; a cluster behind a dead link would hang the follower.
        def _do_request(self, method, endpoint, **kwargs):
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
            return super()._do_request(method, endpoint, **kwargs)

    return Client


def _unreachable(err):
    """Whether `err` from the SDK means the cluster did not answer (rather than answered no)."""
    import requests

    if isinstance(err, (ConnectionError, OSError, requests.RequestException)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and any(f"status code {code}" in text for code in (502, 503, 504))


class RayExecutor(RemoteExecutor):
    name = "ray"

    def client(self, cluster):
        """The cluster's JobSubmissionClient (one per address and headers, made at first use: it checks the
        cluster's Ray version, a round trip)."""
        key = (cluster.address, tuple(sorted(cluster.headers.items())))
        with _lock:
            client = _clients.get(key)
        if client is None:
            try:
                client = _client_class()(cluster.address, headers=dict(cluster.headers) or None)
            except Exception as err:  # noqa: BLE001 - sorted into unreachable or refused below
                raise (Unreachable if _unreachable(err) else Refused)(_short(err)) from None
            with _lock:
                _clients[key] = client
        return client

    def _call(self, cluster, method, *args, **kwargs):
        client = self.client(cluster)
        try:
            return getattr(client, method)(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - sorted below
            if _unreachable(err):
                with _lock:  # the next call checks the cluster afresh (a new head may run another Ray)
                    _clients.pop((cluster.address, tuple(sorted(cluster.headers.items()))), None)
                raise Unreachable(_short(err)) from None
            raise

    def submit(self, cluster, submission):
        env = {**submission.env, "RAY_JOB_STOP_WAIT_TIME_S": str(submission.stop_wait_s)}
        runtime_env = {"env_vars": env}
        if submission.working_dir:
            runtime_env["working_dir"] = submission.working_dir
        count = submission.devices["count"]
        resources = ({"entrypoint_num_gpus": count} if submission.devices["kind"] == "cuda"
                     else {"entrypoint_num_cpus": count})
        try:
            self._call(cluster, "submit_job", entrypoint=submission.entrypoint(), submission_id=submission.id,
                       runtime_env=runtime_env, metadata=submission.metadata, **resources)
        except RuntimeError as err:
            if "already exists" in str(err):  # our own earlier submission of this start: it runs
                return
            raise Refused(_short(err)) from None

    def state(self, cluster, remote_id):
        try:
            info = self._call(cluster, "get_job_info", remote_id)
        except RuntimeError as err:
            if "status code 404" in str(err):
                return None
            raise Unreachable(_short(err)) from None
        status = getattr(info.status, "value", str(info.status))
        if getattr(info, "driver_node_id", None):
            _driver_nodes[remote_id] = info.driver_node_id
        code = getattr(info, "driver_exit_code", None)
        message = info.message or ""
        if status == "FAILED" and code is not None and str(getattr(info, "error_type", "")) == ENTRYPOINT_FAILED:
            # Ray's message is a preamble before the log's last lines, which the job's output has already: say how
            # the run ended as a node's job does, and the follower quotes the log (launch/remote.py, Follower.end).
            message = (f"exited with status {code}" if code >= 0
                       else f"killed by {signal_name(-code)} (signal {-code})")
        return RemoteState(status=status, message=message, exit_code=code,
                           allocation=self._allocation(cluster, info, final=status in ("SUCCEEDED", "FAILED", "STOPPED")))

    def _allocation(self, cluster, info, final):
        """Where the job runs, in Launch.allocation's terms: its driver's node (Ray places the entrypoint on one node;
        workers it starts elsewhere are found by the agents there, by the job's YARDSTICK_JOB_ID), the entrypoint's
        GPUs and CPUs, its start and (once ended) its end; None before a node runs it."""
        node_id = getattr(info, "driver_node_id", None)
        if not node_id or not getattr(info, "start_time", None):
            return None
        if node_id not in _node_names:
            try:
                listed = self._listed_nodes(cluster)
            except Unreachable:
                listed = []
            for row in listed:
                _node_names[row.get("node_id")] = (row.get("node_name") or row.get("node_ip") or "",
                                                   row.get("node_ip") or "")
        # The node's IP is also in the address of the agent that runs the driver, where the list did not have it.
        name, address = _node_names.get(node_id) or ("", urlsplit(info.driver_agent_http_address or "").hostname or "")
        host = name or address or node_id
        return {"nodes": host, "hosts": [host], "addresses": [address] if address else [], "node_count": 1,
                "ray_node_id": node_id, "gpus": _count(getattr(info, "entrypoint_num_gpus", None)),
                "cpus": _count(getattr(info, "entrypoint_num_cpus", None)), "start": _iso(info.start_time),
                "end": _iso(info.end_time) if final and info.end_time else None}

    def log(self, cluster, remote_id, job_dir=""):
        """The driver's log file as it was written, from the log API of the node the driver runs on (carriage
        returns kept, so a progress bar is one line at its last state, as on a node). `get_job_logs` reads it as
        text, which turns every carriage return into a line break: only where the log API does not give it."""
        node_id = _driver_nodes.pop(remote_id, None)  # (`state` has just read it, on a follower's pass: taken once)
        if node_id is None:
            try:
                node_id = getattr(self._call(cluster, "get_job_info", remote_id), "driver_node_id", None)
            except RuntimeError as err:
                if "status code 404" in str(err):
                    return ""
                raise Unreachable(_short(err)) from None
        if node_id:
            raw = self._raw_log(cluster, node_id, remote_id)
            if raw is not None:
                return raw
        try:
            return self._call(cluster, "get_job_logs", remote_id)
        except RuntimeError as err:
            if "status code 404" in str(err):
                return ""
            raise Unreachable(_short(err)) from None

    def _raw_log(self, cluster, node_id, remote_id):
        """The bytes of the driver's log file as text, or None when the log API does not give them."""
        import requests

        try:
            response = requests.get(f"{cluster.address}/api/v0/logs/file", headers=dict(cluster.headers),
                                    params={"node_id": node_id, "submission_id": remote_id, "lines": -1,
                                            "media_type": "file", "timeout": REQUEST_TIMEOUT_S},
                                    timeout=REQUEST_TIMEOUT_S)
        except requests.RequestException as err:
            raise Unreachable(_short(err)) from None
        if response.status_code in (502, 503, 504):
            raise Unreachable(f"the log API answered {response.status_code}")
        if response.status_code != 200:
            return None
        return response.content.decode("utf-8", errors="replace")

    def cancel(self, cluster, remote_id):
        try:
            self._call(cluster, "stop_job", remote_id)
        except RuntimeError as err:
            raise Unreachable(_short(err)) from None

    def _listed_nodes(self, cluster):
        """The state API's rows of the cluster's nodes, as dicts."""
        from ray.util.state.api import StateApiClient
        from ray.util.state.common import ListApiOptions, StateResource

        try:
            client = StateApiClient(address=cluster.address, headers=dict(cluster.headers) or None)
            rows = client.list(StateResource.NODES, options=ListApiOptions(limit=10_000, timeout=REQUEST_TIMEOUT_S,
                                                                           detail=True),
                               raise_on_missing_output=False)
        except Exception as err:  # noqa: BLE001 - the state API raises its own kinds for a cluster that is down
            raise Unreachable(_short(err)) from None
        return [row if isinstance(row, dict) else vars(row) for row in rows]

    def nodes(self, cluster):
        out = []
        for row in self._listed_nodes(cluster):
            total = row.get("resources_total") or {}
            out.append(RemoteNode(name=row.get("node_name") or row.get("node_ip") or row.get("node_id", ""),
                                  address=row.get("node_ip") or "", alive=row.get("state") == "ALIVE",
                                  head=bool(row.get("is_head_node")), gpus=float(total.get("GPU", 0)),
                                  cpus=float(total.get("CPU", 0))))
        return sorted(out, key=lambda n: (not n.head, n.name))


def _count(value):
    """Ray's count of a resource (a float: 0.5 GPU is one) as a whole number where it is one; None where its answer
    has none (the job details the SDK gives carry no entrypoint resources: the follower takes the recipe's)."""
    if value is None:
        return None
    value = float(value)
    return int(value) if value.is_integer() else value


def _iso(ms):
    """A Ray time (ms since the epoch) as ISO 8601 in UTC."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


def _short(err):
    text = str(err).strip() or type(err).__name__
    return text if len(text) <= 500 else text[:500] + "…"
