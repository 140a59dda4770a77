"""The service layer: orchestration of batches on top of ``core`` (rules) and ``kube`` (API calls).

Nothing here imports kopf: handlers pass in what they know (bodies, an event-posting callback),
so the service can be driven by kopf, by tests or by any other loop.
"""
