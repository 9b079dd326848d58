"""Shared helpers of the controller and runtime tests (this module holds no tests).

`KubeClient` wraps the real `kubernetes` sync client pointed at a running localkube through its kubeconfig.
The upstream example manifests (kubeflow/training-operator v1.8.1 `examples/`) are inlined unchanged (one
long flow list wrapped) so the tests run from a fresh clone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from localkube.cluster import LocalKube

GROUP, VERSION = "kubeflow.org", "v1"
PLURALS = {
    "TFJob": "tfjobs",
    "PyTorchJob": "pytorchjobs",
    "MXJob": "mxjobs",
    "XGBoostJob": "xgboostjobs",
    "PaddleJob": "paddlejobs",
    "MPIJob": "mpijobs",
    "JAXJob": "jaxjobs",
}
SCRIPT = "localkube.dev/script"

TENSORFLOW_SIMPLE = """
apiVersion: "kubeflow.org/v1"
kind: TFJob
metadata:
  name: tfjob-simple
  namespace: kubeflow
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: kubeflow/tf-mnist-with-summaries:latest
              command:
                - "python"
                - "/var/tf_mnist/mnist_with_summaries.py"
"""
PYTORCH_SIMPLE = """
apiVersion: "kubeflow.org/v1"
kind: PyTorchJob
metadata:
  name: pytorch-simple
  namespace: kubeflow
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              imagePullPolicy: Always
              command:
                - "python3"
                - "/opt/pytorch-mnist/mnist.py"
                - "--epochs=1"
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              imagePullPolicy: Always
              command:
                - "python3"
                - "/opt/pytorch-mnist/mnist.py"
                - "--epochs=1"
"""
XGBOOST = """
apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata:
  name: xgboost-dist-iris-test-train
spec:
  xgbReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: xgboost
            image: docker.io/kubeflow/xgboost-dist-iris:latest
            ports:
            - containerPort: 9991
              name: xgboostjob-port
            imagePullPolicy: Always
            args:
              - --job_type=Train
              - --xgboost_parameter=objective:multi:softprob,num_class:3
              - --n_estimators=10
              - --learning_rate=0.1
              - --model_path=/tmp/xgboost-model
              - --model_storage_type=local
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers:
          - name: xgboost
            image: docker.io/kubeflow/xgboost-dist-iris:latest
            ports:
            - containerPort: 9991
              name: xgboostjob-port
            imagePullPolicy: Always
            args:
              - --job_type=Train
              - --xgboost_parameter="objective:multi:softprob,num_class:3"
              - --n_estimators=10
              - --learning_rate=0.1
"""
PADDLE_SIMPLE_CPU = """
apiVersion: "kubeflow.org/v1"
kind: PaddleJob
metadata:
  name: paddle-simple-cpu
  namespace: kubeflow
spec:
  paddleReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: paddle
              image: registry.baidubce.com/paddlepaddle/paddle:2.4.0rc0-cpu
              command:
                - python
              args:
                - "-m"
                - paddle.distributed.launch
                - "run_check"
              ports:
                - containerPort: 37777
                  name: master
              imagePullPolicy: Always
"""
MPI_TENSORFLOW_MNIST = """
apiVersion: kubeflow.org/v1
kind: MPIJob
metadata:
  name: tensorflow-mnist
spec:
  slotsPerWorker: 1
  runPolicy:
    cleanPodPolicy: Running
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - image: horovod/horovod:0.28.1
            name: mpi
            command:
            - mpirun
            args:
            - -np
            - "2"
            - --allow-run-as-root
            - -bind-to
            - none
            - -map-by
            - slot
            - -x
            - LD_LIBRARY_PATH
            - -x
            - PATH
            - -mca
            - pml
            - ob1
            - -mca
            - btl
            - ^openib
            - python
            - /horovod/examples/tensorflow2/tensorflow2_mnist.py
            resources:
              limits:
                cpu: 1
                memory: 2Gi
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - image: horovod/horovod:0.28.1
            name: mpi
            resources:
              limits:
                cpu: 2
                memory: 4Gi
"""
MXNET_DIST = """
apiVersion: "kubeflow.org/v1"
kind: "MXJob"
metadata:
  name: "mxnet-job"
spec:
  jobMode: MXTrain
  mxReplicaSpecs:
    Scheduler:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: mxnet
              image: kubeflow/mxnet-gpu:latest
              ports:
              - containerPort: 9991
                name: mxjob-port
    Server:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: mxnet
              image: kubeflow/mxnet-gpu:latest
              ports:
              - containerPort: 9991
                name: mxjob-port
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: mxnet
              image: kubeflow/mxnet-gpu:latest
              command: ["python3"]
              args: ["/mxnet/mxnet/example/image-classification/train_mnist.py","--num-epochs","10",
                     "--num-layers","2","--kv-store","dist_device_sync","--gpus","0"]
              resources:
                limits:
                  nvidia.com/gpu: 1
              ports:
              - containerPort: 9991
                name: mxjob-port
"""


def example(text: str, *, script: dict | None = None, namespace: str | None = None, **spec: Any) -> dict:
    """An inlined example manifest, optionally with a scripted timeline and extra spec fields."""
    manifest = yaml.safe_load(text)
    if script is not None:
        manifest["metadata"].setdefault("annotations", {})[SCRIPT] = json.dumps(script)
    if namespace is not None:
        manifest["metadata"]["namespace"] = namespace
    manifest["spec"].update(spec)
    return manifest


def container(name: str, **fields: Any) -> dict:
    return {"name": name, "image": f"example/{name}:1", **fields}


def replica(container_name: str, replicas: int = 1, restart_policy: str | None = None, **fields: Any) -> dict:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "template": {"spec": {"containers": [container(container_name, **fields)]}},
    }
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def job(kind: str, name: str, specs: dict, *, script: dict | None = None, **spec: Any) -> dict:
    field = {
        "TFJob": "tfReplicaSpecs",
        "PyTorchJob": "pytorchReplicaSpecs",
        "MXJob": "mxReplicaSpecs",
        "XGBoostJob": "xgbReplicaSpecs",
        "PaddleJob": "paddleReplicaSpecs",
        "MPIJob": "mpiReplicaSpecs",
        "JAXJob": "jaxReplicaSpecs",
    }[kind]
    metadata: dict[str, Any] = {"name": name}
    if script is not None:
        metadata["annotations"] = {SCRIPT: json.dumps(script)}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": metadata,
        "spec": {field: specs, **spec},
    }


def conditions(obj: dict) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c["status"], c.get("reason", ""))
        for c in (obj.get("status") or {}).get("conditions") or []
    ]


def is_true(obj: dict, type_: str) -> bool:
    return any(t == type_ and s == "True" for t, s, _ in conditions(obj))


def replica_status(obj: dict, rtype: str) -> dict:
    return ((obj.get("status") or {}).get("replicaStatuses") or {}).get(rtype) or {}


def env_of(pod: client.V1Pod, container_index: int = 0) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[container_index].env or [] if e.value is not None}


class KubeClient:
    """The real sync client against one localkube, with the waits the tests need."""

    def __init__(self, cluster: LocalKube) -> None:
        assert cluster.kubeconfig is not None
        self.cluster = cluster
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
        self.api = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def create(self, manifest: dict) -> dict:
        namespace = manifest["metadata"].get("namespace", "default")
        return self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[manifest["kind"]], manifest
        )

    def get(self, kind: str, name: str, namespace: str = "default") -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)

    def patch(self, kind: str, name: str, body: dict, namespace: str = "default") -> dict:
        return self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[kind], name, body
        )

    def gone(self, kind: str, name: str, namespace: str = "default") -> bool:
        try:
            self.get(kind, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    def watch_job(
        self,
        kind: str,
        name: str,
        until: Callable[[dict], bool],
        namespace: str = "default",
        timeout: int = 15,
    ) -> list[dict]:
        """Every state of the job seen through a watch, from now until `until` holds (or fails the test)."""
        seen: list[dict] = []
        stream = watch.Watch().stream(
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURALS[kind],
            field_selector=f"metadata.name={name}",
            timeout_seconds=timeout,
        )
        for event in stream:
            seen.append(event["object"])
            if until(event["object"]):
                return seen
        pytest.fail(
            f"{kind} {name} never reached the expected state; last: {conditions(seen[-1]) if seen else None}"
        )

    def wait_condition(self, kind: str, name: str, type_: str, namespace: str = "default") -> dict:
        return self.watch_job(kind, name, lambda obj: is_true(obj, type_), namespace)[-1]

    def pods(self, job_name: str, namespace: str = "default", selector: str = "") -> list[client.V1Pod]:
        labels = f"training.kubeflow.org/job-name={job_name}" + (f",{selector}" if selector else "")
        return sorted(
            self.core.list_namespaced_pod(namespace, label_selector=labels).items,
            key=lambda p: p.metadata.name,
        )

    def events(self, name: str, namespace: str = "default") -> list[client.CoreV1Event]:
        return self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items

    def reasons(self, name: str, namespace: str = "default") -> list[str]:
        return [e.reason for e in self.events(name, namespace)]

    def log(self, pod: str, namespace: str = "default", **kwargs: Any) -> str:
        response = self.core.read_namespaced_pod_log(pod, namespace, _preload_content=False, **kwargs)
        return response.data.decode()

    def read_pod(self, name: str, namespace: str = "default") -> client.V1Pod | None:
        try:
            return self.core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def wait_pod(
        self, name: str, check: Callable[[client.V1Pod], bool], namespace: str = "default"
    ) -> client.V1Pod:
        """Poll one pod until `check` holds for it."""
        found: list[client.V1Pod] = []

        def ready() -> bool:
            pod = self.read_pod(name, namespace)
            if pod is not None and check(pod):
                found.append(pod)
            return bool(found)

        self.wait_until(ready, f"pod {name}")
        return found[0]

    @staticmethod
    def wait_until(check: Callable[[], bool], what: str = "the expected state") -> None:
        deadline = time.monotonic() + 60  # a hang guard, generous for a busy machine
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.02)
        pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def kc(localkube: LocalKube) -> Iterator[KubeClient]:
    """The real client against the `localkube` fixture (default controllers, scripted runtime)."""
    kube_client = KubeClient(localkube)
    yield kube_client
    kube_client.api.close()
    assert localkube.task_errors == []
