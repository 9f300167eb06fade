"""`interlingua serve`: the HTTP endpoint on Ray Serve, built on the embedding layer (`orchestration.embed`).

app.py        the deployment, its routes and its batching
request.py    a request checked against the limits (413, 422)
batch.py      a batch of checked requests answered by one model, each failure kept to its request
models.py     the served model: a model directory or the registry's champion, hot-swapped with a drain
"""
