"""Kubernetes API access for training jobs: ``training.AsyncTrainingJobHook`` and its sync facade
``training.TrainingJobHook``, on the cncf.kubernetes ``kubernetes`` connection.

Modules: ``parameters`` (the hooks' constructor parameters, written once), ``connection`` (the connection's
extras to a cluster configuration), ``kubeconfig`` and ``credentials`` (the kubeconfig as kubectl reads it),
``transport`` (HTTP on httpx, HTTP/2 over TLS), ``retry`` (backoff policy), ``errors``, ``loop_thread`` (the
facade's private event loop). Nothing is imported here, so importing the package stays cheap.
"""
