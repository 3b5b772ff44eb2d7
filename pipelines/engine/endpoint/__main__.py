"""`python -m pipelines.engine.endpoint`: serve the local model (SmolLM2-135M on llama.cpp's server) on loopback until
Ctrl-C, for `srag ask`, `srag discover` or a run pointed at it by `llm.base_url`."""

import sys

from pipelines.engine.endpoint._local import main

sys.exit(main())
