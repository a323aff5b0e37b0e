"""A fleet beyond one machine: shards of a walk (``shards``), the lanes a walk takes (``plan``) and the stale
answers it re-measures (``remeasure``). Kubernetes runs the shards (``deploy/kubernetes``, docs/kubernetes.md)."""
