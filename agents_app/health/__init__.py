"""Health endpoints for load balancers and orchestrators: `/healthz` (liveness) and `/readyz`
(readiness). `checks` holds what readiness means; `views` answers; `urls` routes them.
"""
