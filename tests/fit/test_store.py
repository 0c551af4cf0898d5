"""Stored models: skops round trip with metadata, and refusal of models that do not fit the run."""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest
import skops.io

from perf4sight.errors import DataNotFoundError, FittedModelError
from perf4sight.fit import (
    ArchitectureCatalog,
    PaperExtraTrees,
    build_dataset,
    load_model,
    model_path,
    read_logs,
    save_model,
)
from perf4sight.fit import FamilyCalibration
from perf4sight.features import FEATURE_SETS
from perf4sight.fit.store import library_versions
from perf4sight.networks import architecture_from_spec, read_spec


@pytest.fixture(scope="module")
def dataset(tx2_dir):
    logs = read_logs(["squeezenet"], [0, 50, 90], [tx2_dir / "latency"], ["latency"])
    catalog = ArchitectureCatalog(tx2_dir / "models", complete=False)
    return build_dataset(logs, target="latency", feature_set="paper", stage="training", catalog=catalog)


@pytest.fixture()
def stored(dataset, tmp_path):
    estimator = PaperExtraTrees(n_estimators=20).fit(dataset.features, dataset.target)
    path = save_model(estimator, method="paper", storedir=tmp_path, stage="training", target="latency",
                      dataset=dataset)
    return estimator, path


def test_round_trip_keeps_predictions_and_metadata(dataset, stored, tmp_path, tx2_dir):
    estimator, path = stored
    assert path == model_path(tmp_path, "training", "latency") == tmp_path / "training_latency.skops"
    assert zipfile.is_zipfile(path)  # skops' format, not a pickle
    model = load_model(tmp_path, stage="training", target="latency")
    np.testing.assert_array_equal(model.estimator.predict(dataset.features), estimator.predict(dataset.features))
    meta = model.metadata
    assert (meta["method"], meta["stage"], meta["target"], meta["feature_set"]) == (
        "paper", "training", "latency", "paper")
    assert meta["feature_names"] == list(dataset.features.columns)
    assert meta["training_ranges"]["batch_size"] == [dataset.rows["batch_size"].min(), dataset.rows["batch_size"].max()]
    assert meta["training_ranges"]["params"][0] < meta["training_ranges"]["params"][1]
    assert meta["versions"] == library_versions() and "skops" in meta["versions"]
    assert meta["train_nets"] == ["squeezenet"]
    # predicting straight from an architecture gives the same as from the dataset's rows
    arch = architecture_from_spec(read_spec(tx2_dir / "models" / "squeezenet_50.json"))
    rows = (dataset.rows["model"] == "squeezenet_50").to_numpy()
    sizes = dataset.rows.loc[rows, "batch_size"].tolist()
    predicted, calibrated = model.predict(arch, sizes)
    np.testing.assert_allclose(predicted, estimator.predict(dataset.features[rows]))
    assert not calibrated  # stored without the family's residuals


def test_a_stored_calibration_corrects_its_family_only(dataset, tmp_path, tx2_dir):
    estimator = PaperExtraTrees(n_estimators=20).fit(dataset.features, dataset.target)
    off = np.where(dataset.rows["model"] == "squeezenet_50", 1.1, 1.0)  # as if 10 % too low at level 50
    calibration = FamilyCalibration.of(dataset.rows, estimator.predict(dataset.features) / off)
    save_model(estimator, method="paper", storedir=tmp_path, stage="training", target="latency", dataset=dataset,
               calibration=calibration)
    model = load_model(tmp_path, stage="training", target="latency")
    arch = architecture_from_spec(read_spec(tx2_dir / "models" / "squeezenet_50.json"))
    raw = estimator.predict(model.features(arch, [8, 64]))
    predicted, calibrated = model.predict(arch, [8, 64])
    assert calibrated and (predicted > raw).all()  # pulled up towards level 50's measurements
    other = architecture_from_spec(read_spec(tx2_dir / "models" / "resnet18_50.json"))
    assert model.predict(other, [8])[1] is False  # another network: nothing to carry over


def test_another_stage_or_target_is_refused(stored, tmp_path):
    with pytest.raises(DataNotFoundError, match="training_mem_used.skops"):
        load_model(tmp_path, stage="training", target="mem_used")
    path = model_path(tmp_path, "training", "latency")
    inference = model_path(tmp_path, "inference", "latency")
    path.rename(inference)
    path.with_suffix(".json").rename(inference.with_suffix(".json"))
    with pytest.raises(FittedModelError, match="fitted for stage 'training', this run needs 'inference'"):
        load_model(tmp_path, stage="inference", target="latency")


def test_another_library_version_is_refused(stored, tmp_path, edit_metadata):
    edit_metadata(stored[1], lambda meta: meta["versions"].update({"scikit-learn": "0.24.2"}))
    with pytest.raises(FittedModelError, match="stored by scikit-learn 0.24.2, this is scikit-learn"):
        load_model(tmp_path, stage="training", target="latency")


def test_an_older_storage_format_is_refused(stored, tmp_path, edit_metadata):
    edit_metadata(stored[1], lambda meta: meta.update(format=1))
    with pytest.raises(FittedModelError, match="stored in format 1, this perf4sight reads format 7; fingerprint again"):
        load_model(tmp_path, stage="training", target="latency")


def test_a_model_fitted_on_features_computed_otherwise_is_refused(stored, tmp_path, monkeypatch):
    assert load_model(tmp_path, stage="training", target="latency").metadata["feature_probe"]
    paper = FEATURE_SETS["paper"]

    def changed(arch, batch_sizes, stage):  # one column defined differently since the fit
        table = paper(arch, batch_sizes, stage)
        return table * 1.01

    monkeypatch.setitem(FEATURE_SETS, "paper", changed)
    with pytest.raises(FittedModelError, match="fitted on 'paper' features as another version of the code computed"):
        load_model(tmp_path, stage="training", target="latency")


def test_a_replaced_model_file_is_refused(dataset, stored, tmp_path):
    _, path = stored
    other = PaperExtraTrees(n_estimators=3).fit(dataset.features, dataset.target)
    skops.io.dump(other, path)
    with pytest.raises(FittedModelError, match="does not match its metadata"):
        load_model(tmp_path, stage="training", target="latency")


def test_a_model_without_its_metadata_is_refused(stored, tmp_path):
    """A fit stopped between its two files leaves the model without metadata: unusable,
    so fingerprinting refits it (a missing model would send the user to fit it first)."""
    path = model_path(tmp_path, "training", "latency")
    path.with_suffix(".json").unlink()
    with pytest.raises(FittedModelError, match="training_latency.json is missing; fingerprint again to refit"):
        load_model(tmp_path, stage="training", target="latency")
    assert not list(tmp_path.glob(".*.tmp"))  # the writes left no temporary files behind


def _fix_hash(path):
    import hashlib

    meta = json.loads(path.with_suffix(".json").read_text())
    meta["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_suffix(".json").write_text(json.dumps(meta))


def test_a_model_copied_over_another_target_is_refused_by_its_own_identity(dataset, stored, tmp_path):
    estimator, latency = stored
    memory = save_model(estimator, method="paper", storedir=tmp_path, stage="training", target="mem_used",
                        dataset=dataset)
    assert load_model(tmp_path, stage="training", target="mem_used").metadata["target"] == "mem_used"
    assert not hasattr(estimator, "perf4sight_identity_")  # the caller's estimator is left as it was
    memory.write_bytes(latency.read_bytes())  # the latency model under the memory model's name
    _fix_hash(memory)
    with pytest.raises(FittedModelError, match=r"training_mem_used\.skops: the model inside says it was fitted for "
                                               r"stage training, target latency"):
        load_model(tmp_path, stage="training", target="mem_used")


@pytest.mark.parametrize("content", [b"", b"\x80\x04K\x01.", b"PK\x05\x06" + bytes(18)])
def test_a_model_file_that_is_not_skops_is_one_error(stored, tmp_path, content):
    _, path = stored
    path.write_bytes(content)
    _fix_hash(path)
    with pytest.raises(FittedModelError, match=r"training_latency\.skops: not a (readable )?skops file"):
        load_model(tmp_path, stage="training", target="latency")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(versions=[]), "versions: Input should be a valid dictionary"),
    (lambda m: m.update(feature_set="bogus"), "feature set 'bogus', method 'paper' is fitted on 'paper'"),
    (lambda m: m.update(feature_probe="abc"), "feature_probe: Input should be a valid list"),
    (lambda m: m["feature_names"].__setitem__(0, "bogus"), "feature 'bogus' is not one of the 'paper' features"),
    (lambda m: m.update(bound_ratio={"quantile": 0.95, "ratio": float("nan"), "left_out": "network",
                                     "calibrated_ratio": None}), "bound_ratio.ratio: Input should be a finite number"),
    (lambda m: m.update(family_residuals="abc"), "family_residuals: Input should be a valid dictionary"),
    (lambda m: m.update(training_ranges="zzz"), "training_ranges: Input should be a valid dictionary"),
    (lambda m: m.update(format="6"), "stored in format '6', this perf4sight reads format 7"),
    (lambda m: m.update(layer_groups="abc"), "layer_groups: Input should be a valid dictionary"),
    (lambda m: m.update(method_choice={"chosen": "replay", "errors": "x", "left_out": "network", "reason": ""}),
     "method_choice.errors: Input should be a valid dictionary"),
])
def test_tampered_metadata_is_one_error_naming_the_field(stored, tmp_path, edit_metadata, change, message):
    edit_metadata(stored[1], change)
    with pytest.raises(FittedModelError, match=re.escape(message)):
        load_model(tmp_path, stage="training", target="latency")


def test_half_a_pair_is_an_error_and_no_pair_is_no_model(stored, tmp_path):
    from perf4sight.predict import Predictor

    _, path = stored
    assert Predictor.load(tmp_path).models.keys() == {"latency_ms"}  # no memory model: none stored, no error
    path.unlink()
    path.mkdir()  # a folder where the model was
    with pytest.raises(FittedModelError, match=r"training_latency\.skops: not a file"):
        Predictor.load(tmp_path)
    path.rmdir()
    with pytest.raises(FittedModelError, match=r"training_latency\.json: its model training_latency\.skops is missing"):
        Predictor.load(tmp_path)
