"""Statistics for evaluation results: intervals for one system's score, paired comparisons of two systems on the
same questions, multiple-comparison adjustment, and power. Numpy and SciPy only; it imports nothing of this project,
so every package may use it. README.md says which function to use when.

Sign convention for paired comparisons: A is the first system, B the second, a = both right, b = only A right,
c = only B right, d = neither; every difference is B minus A.
"""

from ._agreement import Kappa, RaterAgreement, cohens_kappa, fleiss_kappa
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
from ._power import min_detectable_effect_paired, min_detectable_effect_paired_binary, questions_needed

__all__ = [
    "MIN_BOOTSTRAP_N", "MIN_LABELS", "Corrected", "Kappa", "RaterAgreement", "bca_interval", "cohens_kappa",
    "fleiss_kappa", "labels_needed",
    "ppi_mean", "ppi_paired_difference", "benjamini_hochberg", "holm", "mcnemar_asymptotic_p",
    "mcnemar_exact_odds_ratio_interval", "mcnemar_exact_p", "mcnemar_midp_difference_interval", "mcnemar_midp_p",
    "mean_interval_clt", "mean_se", "min_detectable_effect_paired", "min_detectable_effect_paired_binary",
    "newcombe_paired_interval", "paired_mean_interval", "paired_mean_p", "percentile_interval", "questions_needed",
    "tango_paired_interval", "tie_groups", "wilson_interval",
]
