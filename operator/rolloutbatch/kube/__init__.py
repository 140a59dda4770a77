"""The storage layer: every Kubernetes API call of the operator lives here.

Objects travel as plain dicts (the JSON the API speaks), never as client models: the manifest
builders in ``core`` return dicts, and reading dicts avoids deserialising whole typed models for
each of thousands of pods. HTTP goes through pykube-ng's ``HTTPClient`` (a pooled ``requests``
session that loads kubeconfig or in-cluster credentials). Calls are synchronous; the async layers
above run them with ``asyncio.to_thread``. Four run on the event loop instead, over aiohttp
with the same kubeconfig (``async_session``): log reads (``async_logs``), a warm pool's writes
(``async_writes``: its claims, a burst of them, queued behind the GIL in threads), pods/exec (``pod_exec``)
and pods/attach (``pod_attach``), WebSockets, which ``requests`` cannot carry. API errors are
mapped to ``kube.errors`` so nothing above this package sees an HTTP status code.
"""
