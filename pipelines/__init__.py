"""Everything distributed or persistent around the agent:

- `pipelines.cli`: the `srag` command line, one thin module per command;
- `pipelines.engine`: run lifecycle, scheduler, Ray workers, results store, MLflow tracking;
- `pipelines.config`: run and sweep configs (pydantic);
- `pipelines.datasets` and `pipelines.converters`: the dataset registry and the converters of public formats;
- `pipelines.local_llm`: the local model server (`LocalModelServer`), which runs `pipelines.llama_server`
  (llama.cpp's HTTP server from the `xllamacpp` wheel) as a child process;
- `pipelines/samples/`: small shipped samples with their attribution.
"""
