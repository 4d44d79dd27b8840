"""``RetrievalJudgedAtKLow`` on Prometheus's own rule engine (``promtool test rules``):
a facet value whose rolling judged@k falls well below its daily level fires, one that
holds steady does not, and neither fires on too little traffic."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.prom_support import RULES_DIR, binary

# A day at 10 results a minute with judged@k 0.9, then 90 minutes: "all" at 0.4 (a new
# index returning unjudged ids), "type=faq" still at 0.9, "type=rare" at 0.4 but one
# result a minute (60 an hour: under the alert's 100).
TEST = """
rule_files: [{recording}, {alerts}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'scorer_retrieval_judged_at_k_sum{{facet="all", value="all"}}'
        values: '0+9x1440 12964+4x89'
      - series: 'scorer_retrieval_judged_at_k_count{{facet="all", value="all"}}'
        values: '0+10x1530'
      - series: 'scorer_retrieval_ndcg_at_10_count{{facet="all", value="all"}}'
        values: '0+10x1530'
      - series: 'scorer_retrieval_judged_at_k_sum{{facet="type", value="faq"}}'
        values: '0+9x1530'
      - series: 'scorer_retrieval_judged_at_k_count{{facet="type", value="faq"}}'
        values: '0+10x1530'
      - series: 'scorer_retrieval_ndcg_at_10_count{{facet="type", value="faq"}}'
        values: '0+10x1530'
      - series: 'scorer_retrieval_judged_at_k_sum{{facet="type", value="rare"}}'
        values: '0+0.9x1440 1296.4+0.4x89'
      - series: 'scorer_retrieval_judged_at_k_count{{facet="type", value="rare"}}'
        values: '0+1x1530'
      - series: 'scorer_retrieval_ndcg_at_10_count{{facet="type", value="rare"}}'
        values: '0+1x1530'
    promql_expr_test:
      - expr: round(facet_value:scorer_retrieval_judged_at_k:mean_rate1h, 0.001)
        eval_time: 1530m
        exp_samples:
          - labels: '{{facet="all", value="all"}}'
            value: 0.4
          - labels: '{{facet="type", value="faq"}}'
            value: 0.9
          - labels: '{{facet="type", value="rare"}}'
            value: 0.4
      - expr: ALERTS{{alertname="RetrievalJudgedAtKLow", alertstate="firing"}}
        eval_time: 1530m
        exp_samples:
          - labels: >-
              {{__name__="ALERTS", alertname="RetrievalJudgedAtKLow", alertstate="firing",
              facet="all", value="all", severity="warning"}}
            value: 1
      - expr: ALERTS{{alertname="RetrievalJudgedAtKLow"}}
        eval_time: 1439m
        exp_samples: []
"""


def test_judged_at_k_low_fires_for_a_stale_golden_set_only(tmp_path: Path) -> None:
    test_file = tmp_path / "judged-alert-test.yml"
    test_file.write_text(
        TEST.format(
            recording=RULES_DIR / "scorer-recording.yml", alerts=RULES_DIR / "scorer-alerts.yml"
        )
    )
    out = subprocess.run(
        [binary("promtool"), "test", "rules", str(test_file)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
