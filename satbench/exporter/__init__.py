"""The satbench runtime exporter: ``runtime_*`` and ``gpu_*`` metrics for one runtime node.

``satbench exporter --runtime-url URL`` runs :class:`exporter.collector.RuntimeCollector` on a private
registry; the runtime is reached through an adapter (:mod:`exporter.adapter`, llama.cpp in
:mod:`exporter.llamacpp`), GPUs through readers (:mod:`exporter.gpu`), the runtime process through
:mod:`exporter.process`. A llama-server in router mode (:mod:`exporter.router`) is served per model, with a
``model`` label; KV-cache usage is derived from ``/slots`` (:mod:`exporter.kvcache`), and the series are
built in :mod:`exporter.runtime_series`. :mod:`exporter.promconfig` writes a run's ``prometheus.yml``.
The metric names and what each one means are listed in ``exporter/README.md``. Importing this package
loads nothing heavy.
"""

from __future__ import annotations

__all__: list[str] = []
