"""Everything distributed or persistent around the agent:

- `pipelines.cli`: the `srag` command line, one thin module per command;
- `pipelines.engine`: everything that runs, stores and reports runs, in rooms by job (its `__init__` is the map),
  the local model server among them (`pipelines.engine.endpoint`);
- `pipelines.config`: run and sweep configs (pydantic);
- `pipelines.datasets` and `pipelines.converters`: the dataset registry and the converters of public formats;
- `pipelines/samples/`: small shipped samples with their attribution.
"""
