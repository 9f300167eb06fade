"""`interlingua serve`: the HTTP endpoint on Ray Serve, built on the embedding layer (`orchestration.embed`).

app.py        the deployment: a FastAPI ingress, its routes, its batching
schema.py     the API's pydantic models: what /openapi.json and /docs describe
request.py    a request checked against the limits (413, 422)
batch.py      a batch of checked requests answered by one model, each failure kept to its request
models.py     the served model: a model directory or the registry's champion, hot-swapped with a drain
"""
