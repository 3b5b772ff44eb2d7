"""Controlling Authority Retrieval (CAR) baselines: datasets, the authority model, retrievers and the TCA scorer.

    from car_baselines import load_dataset, build_retriever, evaluate
    ds = load_dataset("finsuperqa")
    print(evaluate(ds, build_retriever("bm25", ds), k=5).tca_at_k)

Any object with `retrieve(query: str, k: int) -> list[str]` (document ids, best first) can be scored in place of a
built-in retriever. This package never imports Ray or MLflow; `srag car` (pipelines/engine/car/) adds those.

The public surface is `__all__` below; the `_x.py` modules are private and may change.
"""

from ._authority import (
    FINSUPERQA_RULES,
    LEGAL_RULES,
    MEDICAL_RULES,
    SECURITY_RULES,
    AuthorityGraph,
    Rule,
    rssg,
    rule_edges,
)
from ._datasets import (
    DATASETS,
    dataset_available,
    dataset_names,
    default_data_dir,
    load_dataset,
    load_overruling_pairs,
    make_example,
    subset,
)
from ._domains import finance_domain, legal_domain, medical_domain, security_domain
from ._metrics import (
    bootstrap_mean_interval,
    controlling_rank,
    no_ignored_superseder,
    rank_of,
    ranks_from_scores,
    recall_at_k,
    reciprocal_rank,
    tca_at_k,
    wilson_interval,
)
from ._model import CarDataError, Corpus, Dataset, Doc, Domain, Example, LexicalProfile
from ._retrievers import (
    RETRIEVER_NAMES,
    BM25Retriever,
    CorpusRetriever,
    DenseReRankRetriever,
    DenseRetriever,
    OracleRetriever,
    Ranking,
    RegexNERRetriever,
    Retriever,
    TfidfRetriever,
    TwoStageRetriever,
    build_retriever,
    load_custom_retriever,
)
from ._scorer import EvalResult, ExampleScore, evaluate

__all__ = [
    "AuthorityGraph", "BM25Retriever", "CarDataError", "Corpus", "CorpusRetriever", "DATASETS", "Dataset",
    "DenseReRankRetriever", "DenseRetriever", "Doc", "Domain", "EvalResult", "Example", "ExampleScore",
    "FINSUPERQA_RULES", "LEGAL_RULES", "LexicalProfile", "MEDICAL_RULES", "OracleRetriever", "RETRIEVER_NAMES",
    "Ranking", "RegexNERRetriever", "Retriever", "Rule", "SECURITY_RULES", "TfidfRetriever", "TwoStageRetriever",
    "bootstrap_mean_interval", "build_retriever", "controlling_rank", "dataset_available", "dataset_names",
    "default_data_dir", "evaluate", "load_custom_retriever", "finance_domain", "legal_domain", "load_dataset",
    "load_overruling_pairs", "make_example", "medical_domain", "security_domain", "no_ignored_superseder",
    "rank_of", "ranks_from_scores", "recall_at_k", "reciprocal_rank", "rssg", "rule_edges", "subset", "tca_at_k",
    "wilson_interval",
]
