"""`srag car`: one cell, bad input, and a grid on Ray logged to MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.test_car_datasets import write_data  # tiny CAR data files shared with the loader tests


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    return write_data(tmp_path / "car")


def car(data: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["car", "--data-root", str(data.parent), "--cache-dir", str(tmp_path / "cache"), *extra]  # data: ROOT/car


def test_one_cell_prints_one_json_result(data, tmp_path, capsys):
    assert main(car(data, tmp_path, "--dataset", "finsuperqa", "--retriever", "two_stage", "--stage1", "bm25",
                    "--json")) == 0
    out = capsys.readouterr().out
    result = json.loads(out)
    assert out.count("\n") == 1
    for key in ("dataset", "retriever", "n", "k", "tca_at_k", "recall_at_k", "mean_rank", "median_rank", "mrr",
                "tca_ci95"):
        assert key in result
    assert (result["dataset"], result["retriever"], result["n"], result["k"]) == ("finsuperqa", "two_stage", 3, 5)
    assert result["tca_at_k"] == 1.0 and result["tca_ci95"][1] == 1.0
    assert set(result["tca_by_hop"]) == {"T0", "T1", "T2"}
    assert "rows" not in result


def test_split_k_and_rows(data, tmp_path, capsys):
    assert main(car(data, tmp_path, "--dataset", "finsuperqa", "--retriever", "bm25", "--split", "test", "--k", "1",
                    "--json", "--rows")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 1 and result["k"] == 1 and result["split"] == "test"
    assert [row["example_id"] for row in result["rows"]] == ["ex-t2"]


def test_text_output_names_the_metrics(data, tmp_path, capsys):
    assert main(car(data, tmp_path, "--dataset", "legal-real", "--retriever", "regex_ner")) == 0
    out = capsys.readouterr().out
    assert "legal-real / regex_ner" in out and "TCA@5        1.000" in out


@pytest.mark.parametrize("args,message", [
    (("--dataset", "nope", "--retriever", "bm25"), "unknown dataset 'nope'"),
    (("--dataset", "finsuperqa", "--retriever", "bm2"), "unknown retriever 'bm2'"),
    (("--dataset", "finsuperqa", "--retriever", "bm25", "--k", "0"), "--k must be a positive integer"),
    (("--dataset", "finsuperqa", "--retriever", "bm25", "--k1", "-1"), "--k1 must be a positive integer"),
    (("--dataset", "fda", "--retriever", "bm25"), "fda_recall_pairs.json"),
    (("--dataset", "scotus", "--retriever", "bm25"), "SCOTUS pairs file is not available"),
    (("--dataset", "ghsa", "--retriever", "nosuchmodule:Thing"), "cannot load custom retriever"),
])
def test_bad_input_exits_2_with_one_line(data, tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.delenv("CAR_SCOTUS_FILE", raising=False)
    assert main(car(data, tmp_path, *args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("srag car: error: ") and message in err and err.count("\n") == 1


def test_malformed_data_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad" / "car"
    bad.mkdir(parents=True)
    (bad / "finsuperqa_v1.jsonl").write_text("{broken\n")
    assert main(car(bad, tmp_path, "--dataset", "finsuperqa", "--retriever", "bm25")) == 2
    assert "line 1 is not valid JSON" in capsys.readouterr().err


def test_a_grid_file_gives_the_flags_and_flags_beside_it_win(data, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("dataset: [finsuperqa]\nretriever: bm25\nsplit: test\nk: 1\n")
    assert main(car(data, tmp_path, "--grid", str(grid), "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["dataset"], result["retriever"], result["split"], result["k"]) == ("finsuperqa", "bm25", "test", 1)
    assert main(car(data, tmp_path, "--grid", str(grid), "--k", "2", "--split", "all", "--json")) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["split"], result["k"], result["witness"]) == ("all", 2, "direct")  # the default where neither says
    grid.write_text("dataset: finsuperqa\nretrievers: bm25\n")
    assert main(car(data, tmp_path, "--grid", str(grid))) == 2
    assert capsys.readouterr().err == f"srag car: error: {grid}: retrievers: unknown key (did you mean retriever?)\n"
    assert main(car(data, tmp_path, "--dataset", "finsuperqa")) == 2
    assert "give --dataset and --retriever, or a --grid file" in capsys.readouterr().err


def test_missing_data_folder_exits_2(tmp_path, capsys):
    (tmp_path / "root").mkdir()  # a data root without the car/ folder
    assert main(car(tmp_path / "root" / "car", tmp_path, "--dataset", "finsuperqa", "--retriever", "bm25")) == 2
    assert "data folder not found" in capsys.readouterr().err


def test_grid_runs_on_ray_and_logs_parent_and_children(ray_local, data, tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert main(car(data, tmp_path, "--dataset", "finsuperqa,legal-real", "--retriever", "oracle,regex_ner",
                    "--tracking-uri", uri, "--experiment", "car-test", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    results = report["results"]
    assert [(r["dataset"], r["retriever"]) for r in results] == [
        (d, r) for d in ("finsuperqa", "legal-real") for r in ("oracle", "regex_ner")]

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("car-test")
    parent = client.get_run(report["parent_run_id"])
    assert parent.data.params["datasets"] == "finsuperqa,legal-real" and parent.data.params["k"] == "5"
    children = client.search_runs([exp.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 4
    logged = {(c.data.params["dataset"], c.data.params["retriever"]): c.data for c in children}
    for r in results:
        data_ = logged[(r["dataset"], r["retriever"])]
        assert data_.metrics["tca_at_k"] == pytest.approx(r["tca_at_k"])
        assert data_.metrics["mrr"] == pytest.approx(r["mrr"])
        assert data_.metrics["tca_ci95_low"] == pytest.approx(r["tca_ci95"][0])
    assert logged[("finsuperqa", "oracle")].metrics["tca_T2"] == 1.0
    assert logged[("legal-real", "regex_ner")].metrics["tca_at_k"] == 1.0
    assert all(c.info.status == "FINISHED" for c in children)
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id)]
    assert "car_grid.txt" in artifacts


@pytest.mark.slow
def test_a_grid_starts_its_local_ray_on_loopback(data, tmp_path):
    from tests.pipeline_helpers import assert_local_ray_on_loopback

    argv = car(data, tmp_path, "--dataset", "finsuperqa,legal-real", "--retriever", "oracle",
               "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--json")
    assert_local_ray_on_loopback(f"from pipelines.cli import main\nassert main({argv!r}) == 0\n")


def test_the_grid_table_names_its_interval_as_tcas(data, tmp_path):
    from pipelines.engine.car import grid_table, run_cell

    options = {"k": 5, "split": "all", "witness": "direct", "cache_dir": str(tmp_path / "cache")}
    head = grid_table([run_cell("finsuperqa", "bm25", str(data), options)]).splitlines()[0]
    assert "TCA 95% CI" in head and head.index("TCA@k") < head.index("TCA 95% CI") < head.index("R@k")


def test_a_grid_without_a_tracking_uri_logs_under_runs_dir(ray_local, data, tmp_path, capsys, monkeypatch,
                                                           user_locations):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    argv = ["car", "--data-root", str(data.parent), "--dataset", "finsuperqa,legal-real", "--retriever", "oracle",
            "--json"]
    assert main(argv + ["--runs-dir", str(tmp_path / "mine")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tracking_uri"] == f"sqlite:///{tmp_path / 'mine' / 'mlflow.db'}"
    assert (tmp_path / "mine" / "mlflow.db").is_file() and not (tmp_path / "runs").exists()
    from mlflow.tracking import MlflowClient

    params = MlflowClient(tracking_uri=report["tracking_uri"]).get_run(report["parent_run_id"]).data.params
    assert params["cache_dir"] == str(user_locations / "car")  # the cache folder's, as --cache-dir was not given
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # mlflow.set_tracking_uri exported the first grid's URI
    assert main(argv) == 0 and (tmp_path / "runs" / "mlflow.db").is_file()  # the default: ./runs


def test_the_shipped_sample_needs_no_data_folder(tmp_path, capsys):
    assert main(["car", "--dataset", "legal-real-sample", "--retriever", "oracle", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["dataset"], result["n"], result["tca_at_k"]) == ("legal-real-sample", 12, 1.0)


def test_a_dataset_that_needs_data_names_what_to_set(tmp_path, capsys, monkeypatch):
    assert main(["car", "--dataset", "ghsa,legal-real-sample", "--retriever", "bm25"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("srag car: error: CAR dataset ghsa needs a data root") and err.count("\n") == 1
    assert "--data-root" in err and "CAR_DATA_DIR" in err and "SRAG_DATA_DIR" in err
    root = tmp_path / "root"
    write_data(root / "car")
    monkeypatch.setenv("SRAG_DATA_DIR", str(root))  # its car/ folder, as --data-root would give it
    assert main(["car", "--dataset", "finsuperqa", "--retriever", "oracle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 3
    assert main(["car", "--dataset", "finsuperqa", "--retriever", "oracle", "--data-root", str(tmp_path)]) == 2
    assert f"CAR data folder not found: {tmp_path / 'car'}" in capsys.readouterr().err
