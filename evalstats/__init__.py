"""Statistics for evaluation results: intervals for one system's score, paired comparisons of two systems on the
same questions, multiple-comparison adjustment, and power. Numpy and SciPy only; it imports nothing of this project,
so every package may use it. README.md says which function to use when.

Sign convention for paired comparisons: A is the first system, B the second, a = both right, b = only A right,
c = only B right, d = neither; every difference is B minus A.
"""

from ._agreement import Kappa, RaterAgreement, cohens_kappa, fleiss_kappa
from ._clustered import (
    MIN_EFFECTIVE_CLUSTERS,
    ClusteredMean,
    clustered_mean,
    cr2_variance,
    effective_clusters,
    intraclass_correlation,
    satterthwaite_df,
)
from ._corrected import MIN_LABELS, Corrected, labels_needed, ppi_mean, ppi_paired_difference
from ._intervals import (
    MIN_BOOTSTRAP_N,
    bca_interval,
    mean_interval_clt,
    mean_se,
    percentile_interval,
    wilson_interval,
)
from ._multiplicity import benjamini_hochberg, holm, tie_groups
from ._paired import (
    mcnemar_asymptotic_p,
    mcnemar_exact_odds_ratio_interval,
    mcnemar_exact_p,
    mcnemar_midp_difference_interval,
    mcnemar_midp_p,
    newcombe_paired_interval,
    paired_mean_interval,
    paired_mean_p,
    tango_paired_interval,
)
from ._power import (
    binary_power,
    min_detectable_effect_binary,
    min_detectable_effect_paired,
    min_detectable_effect_paired_binary,
    min_detectable_effect_t,
    questions_needed,
    questions_needed_binary,
    questions_needed_t,
    t_power,
)
from ._unconditional import (
    EXACT_BELOW_DISCORDANT,
    BinaryComparison,
    exact_unconditional_interval,
    exact_unconditional_p,
    paired_binary,
    tango_statistic,
)

__all__ = [
    "bca_interval", "benjamini_hochberg", "binary_power", "BinaryComparison", "clustered_mean", "ClusteredMean",
    "cohens_kappa", "Corrected", "cr2_variance", "effective_clusters", "EXACT_BELOW_DISCORDANT",
    "exact_unconditional_interval", "exact_unconditional_p", "fleiss_kappa", "holm", "intraclass_correlation",
    "Kappa", "labels_needed", "mcnemar_asymptotic_p", "mcnemar_exact_odds_ratio_interval", "mcnemar_exact_p",
    "mcnemar_midp_difference_interval", "mcnemar_midp_p", "mean_interval_clt", "mean_se", "MIN_BOOTSTRAP_N",
    "min_detectable_effect_binary", "min_detectable_effect_paired", "min_detectable_effect_paired_binary",
    "min_detectable_effect_t", "MIN_EFFECTIVE_CLUSTERS", "MIN_LABELS", "newcombe_paired_interval", "paired_binary",
    "paired_mean_interval", "paired_mean_p", "percentile_interval", "ppi_mean", "ppi_paired_difference",
    "questions_needed", "questions_needed_binary", "questions_needed_t", "RaterAgreement", "satterthwaite_df",
    "t_power", "tango_paired_interval", "tango_statistic", "tie_groups", "wilson_interval",
]
