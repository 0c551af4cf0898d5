"""Stored models: skops round trip of the one fitted object with its header, refusal of
models that do not fit the run, and of a folder's models of two fingerprints; on the H200
measurements in the repository."""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest
import skops.io
from repository_data import H200

from perf4sight import console
from perf4sight.architecture import Detail
from perf4sight.device.definitions import LATENCY, MEMORY
from perf4sight.errors import DataNotFoundError, FittedModelError
from perf4sight.features import FEATURE_SETS, queries
from perf4sight.fit import (
    BOUND_QUANTILE,
    ArchitectureCatalog,
    CalibratedModel,
    FamilyCalibration,
    Fingerprint,
    PaperExtraTrees,
    build_dataset,
    load_model,
    stored_model_path,
    read_logs,
    save_models,
)
from perf4sight.fit.methods import trusted_types
from perf4sight.fit.store import library_versions, model_hash
from perf4sight.networks import load_architecture

NETS = ["squeezenet", "resnet18", "googlenet"]
H200_RUN = Fingerprint(device="NVIDIA H200", campaign="environment-20261129T225952Z.json",
                       fitted_at="2026-12-03T12:00:00+00:00")


def _dataset(quantity):
    logs = read_logs(NETS, [0, 30, 90], [H200 / quantity.kind], [quantity])
    catalog = ArchitectureCatalog(H200 / "models")
    return build_dataset(logs, target=quantity.name, feature_set="network", stage="training", catalog=catalog)


@pytest.fixture(scope="module")
def dataset():
    return _dataset(LATENCY)


@pytest.fixture(scope="module")
def fitted(dataset):
    return CalibratedModel("physical", "latency_ms").fit(dataset.rows, dataset.target)


@pytest.fixture()
def stored(dataset, fitted, tmp_path):
    [path] = save_models([fitted], storedir=tmp_path, fingerprint=H200_RUN)
    return fitted, path


def test_round_trip_keeps_predictions_and_what_they_read(dataset, stored, tmp_path):
    fitted, path = stored
    assert path == stored_model_path(tmp_path, "training", "latency_ms") == tmp_path / "training_latency_ms.skops"
    assert zipfile.is_zipfile(path)  # skops' format, not a pickle
    model = load_model(tmp_path, stage="training", target="latency_ms")
    assert type(model) is CalibratedModel and model.get_params() == fitted.get_params()
    np.testing.assert_array_equal(model.predict(dataset.rows), fitted.predict(dataset.rows))
    assert model.calibration_.residuals == fitted.calibration_.residuals
    # what a prediction reads is the estimator's, fitted from the rows, not the header's
    assert model.feature_names_ == list(dataset.features.columns)
    assert model.training_ranges_["batch_size"] == (dataset.rows["batch_size"].min(), dataset.rows["batch_size"].max())
    assert model.training_ranges_["params"][0] < model.training_ranges_["params"][1]
    assert model.training_ranges_["measured"] == (dataset.target.min(), dataset.target.max())
    assert model.train_nets_ == sorted(NETS) and model.recipes_ == dataset.recipes()
    assert model.layer_groups_ == fitted.layer_groups_ and model.layer_groups_["conv_1x1"] == 3
    assert model.method_choice_ is None and model.torch_version_reason is None
    header = json.loads(path.with_suffix(".json").read_text())
    assert (header["method"], header["stage"], header["target"], header["feature_set"]) == (
        "physical", "training", "latency_ms", "network")
    assert header["estimator"] == "features: FeatureTransformer > terms: TermDesign > solver: LatencySolver"
    assert header["fingerprint"] == {"device": "NVIDIA H200", "campaign": "environment-20261129T225952Z.json",
                                     "fitted_at": "2026-12-03T12:00:00+00:00"}
    assert header["versions"] == library_versions() and "skops" in header["versions"]
    assert set(header) == {"format", "stage", "target", "method", "feature_set", "estimator", "fingerprint",
                           "versions", "feature_probe", "sha256"}
    # predicting straight from an architecture gives the same as from the dataset's rows
    arch = ArchitectureCatalog(H200 / "models").get("squeezenet_30")
    rows = (dataset.rows["model"] == "squeezenet_30").to_numpy()
    sizes = dataset.rows.loc[rows, "batch_size"].tolist()
    query = queries(arch, sizes)
    predicted = model.predict(query)
    np.testing.assert_allclose(predicted, fitted.predict(dataset.rows[rows].reset_index(drop=True)), rtol=1e-12)
    assert model.calibrated(query).all()


def test_a_memory_model_keeps_its_bound_and_its_predictions(tmp_path):
    console.set_quiet(True)
    memory = _dataset(MEMORY)
    fitted = CalibratedModel("physical", "mem_used_mib", bound_quantile=BOUND_QUANTILE).fit(memory.rows, memory.target)
    save_models([fitted], storedir=tmp_path, fingerprint=H200_RUN)
    # one object: its regressor, its corrections and its bound, only types a method declares
    untrusted = skops.io.get_untrusted_types(file=stored_model_path(tmp_path, "training", "mem_used_mib"))
    assert set(untrusted) == {"perf4sight.fit.calibration.CalibratedModel",
                              "perf4sight.fit.calibration.FamilyCalibration",
                              "perf4sight.device.recipe.Recipe",
                              "perf4sight.features.transform.FeatureTransformer",
                              "perf4sight.fit.physical.TermDesign",
                              "perf4sight.fit.physical.MemorySolver"}
    loaded = load_model(tmp_path, stage="training", target="mem_used_mib")
    assert loaded.bound_ == fitted.bound_ and fitted.bound_["calibrated_ratio"] is not None
    never_profiled = queries(load_architecture("vgg11", input_size=(3, 224, 224), num_classes=1000), [8, 64])
    for query in (memory.rows, never_profiled):
        np.testing.assert_array_equal(fitted.predict(query), loaded.predict(query))
        np.testing.assert_array_equal(fitted.predict_bound(query), loaded.predict_bound(query))
    assert fitted.calibrated(memory.rows).all() and not fitted.calibrated(never_profiled).any()
    assert loaded.capacity_mib() == fitted.capacity_mib()  # infinite: the H200 never ran out of memory
    np.testing.assert_array_equal(loaded.predict_fits(memory.rows), fitted.predict_fits(memory.rows))


def test_another_stage_or_target_is_refused(stored, tmp_path):
    with pytest.raises(DataNotFoundError, match="training_mem_used_mib.skops"):
        load_model(tmp_path, stage="training", target="mem_used_mib")
    path = stored_model_path(tmp_path, "training", "latency_ms")
    inference = stored_model_path(tmp_path, "inference", "latency_ms")
    path.rename(inference)
    path.with_suffix(".json").rename(inference.with_suffix(".json"))
    with pytest.raises(FittedModelError, match="fitted for stage 'training', this run needs 'inference'"):
        load_model(tmp_path, stage="inference", target="latency_ms")


def test_another_library_version_is_refused(stored, tmp_path, edit_header):
    edit_header(stored[1], lambda meta: meta["versions"].update({"scikit-learn": "0.24.2"}))
    with pytest.raises(FittedModelError, match="stored by scikit-learn 0.24.2, this is scikit-learn"):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_an_older_storage_format_is_refused(stored, tmp_path, edit_header):
    edit_header(stored[1], lambda meta: meta.update(format=1))
    with pytest.raises(FittedModelError, match="stored in format 1, this perf4sight reads format 29; fingerprint again"):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_a_model_of_format_14_is_refused_in_one_line(dataset, fitted, tmp_path):
    """Format 14 kept what a prediction reads in the metadata beside the model, as `save_models`
    wrote it then: refused by its format before anything else is read."""
    path = stored_model_path(tmp_path, "training", "latency_ms")
    skops.io.dump(fitted, path)
    path.with_suffix(".json").write_text(json.dumps({
        "format": 14, "method": "physical", "method_choice": None, "layer_groups": fitted.layer_groups_,
        "stage": "training", "target": "latency_ms", "training_ranges": {"batch_size": [8, 128]},
        "sha256": "0" * 64}))
    with pytest.raises(FittedModelError) as error:
        load_model(tmp_path, stage="training", target="latency_ms")
    assert str(error.value) == (f"{path.with_suffix('.json')}: stored in format 14, this perf4sight reads format 29; "
                                "fingerprint again to refit")


def test_a_model_fitted_on_features_computed_otherwise_is_refused(stored, tmp_path, monkeypatch):
    assert json.loads(stored[1].with_suffix(".json").read_text())["feature_probe"]
    load_model(tmp_path, stage="training", target="latency_ms")
    network = FEATURE_SETS["network"]

    def changed(arch, batch_sizes, stage):  # one column defined differently since the fit
        table = network(arch, batch_sizes, stage)
        return table * 1.01

    changed.needs = network.needs
    monkeypatch.setitem(FEATURE_SETS, "network", changed)
    with pytest.raises(FittedModelError, match="fitted on 'network' features as another version of the code computed"):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_a_replaced_model_file_is_refused(dataset, stored, tmp_path):
    _, path = stored
    other = CalibratedModel("physical", "latency_ms").fit(dataset.rows, dataset.target * 2)
    skops.io.dump(other, path)
    with pytest.raises(FittedModelError, match="the model file and its header training_latency_ms.json do not match"):
        load_model(tmp_path, stage="training", target="latency_ms")


@pytest.mark.parametrize("change", [
    lambda m: m["fingerprint"].update(device="Jetson TX2"),
    lambda m: m["feature_probe"][0].__setitem__(0, m["feature_probe"][0][0] + 1.0),
    lambda m: m.update(estimator="trees"),
])
def test_the_hash_covers_the_header_too(stored, tmp_path, change):
    """Every field of the header is under the hash, as the model's bytes are."""
    meta_path = stored[1].with_suffix(".json")
    header = json.loads(meta_path.read_text())
    change(header)
    meta_path.write_text(json.dumps(header))
    with pytest.raises(FittedModelError, match="the model file and its header training_latency_ms.json do not match"):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_a_folder_s_models_of_two_fingerprints_are_not_combined(dataset, fitted, tmp_path):
    from perf4sight.predict import Predictor

    memory = CalibratedModel("physical", "mem_used_mib").fit(dataset.rows, dataset.target)
    save_models([fitted], storedir=tmp_path, fingerprint=H200_RUN)
    later = Fingerprint(H200_RUN.device, H200_RUN.campaign, fitted_at="2026-12-04T08:00:00+00:00")
    save_models([memory], storedir=tmp_path, fingerprint=later)
    # the same device and campaign, fitted at two times (one kept with overwrite = False): one fingerprint
    assert Predictor.load(tmp_path).models.keys() == {"mem_used_mib", "latency_ms"}
    tx2 = Fingerprint("Jetson TX2", "/data/tx2", fitted_at="2026-12-01T09:00:00+00:00")
    save_models([memory], storedir=tmp_path, fingerprint=tx2)
    with pytest.raises(FittedModelError) as error:
        Predictor.load(tmp_path)
    assert str(error.value) == (
        f"{tmp_path}: its mem_used_mib model is of another fingerprint than its latency_ms model (device Jetson TX2, "
        "campaign /data/tx2, fitted at 2026-12-01T09:00:00+00:00; device NVIDIA H200, campaign "
        "environment-20261129T225952Z.json, fitted at 2026-12-03T12:00:00+00:00); fingerprint both again into one folder")


def test_a_model_without_its_header_is_refused(stored, tmp_path):
    """A fit stopped between its two files leaves the model without a header: unusable,
    so fingerprinting refits it (a missing model would send the user to fit it first)."""
    path = stored_model_path(tmp_path, "training", "latency_ms")
    path.with_suffix(".json").unlink()
    with pytest.raises(FittedModelError, match="training_latency_ms.json is missing; fingerprint again to refit"):
        load_model(tmp_path, stage="training", target="latency_ms")
    assert not list(tmp_path.glob(".*.tmp"))  # the writes left no temporary files behind


def _fix_hash(path):
    meta = json.loads(path.with_suffix(".json").read_text())
    meta["sha256"] = model_hash(path.read_bytes(), meta)
    path.with_suffix(".json").write_text(json.dumps(meta))


def test_a_model_copied_over_another_target_is_refused_by_its_own_identity(dataset, stored, tmp_path):
    _, latency = stored
    as_memory = CalibratedModel("physical", "mem_used_mib").fit(dataset.rows, dataset.target)
    [memory] = save_models([as_memory], storedir=tmp_path, fingerprint=H200_RUN)
    assert load_model(tmp_path, stage="training", target="mem_used_mib").target == "mem_used_mib"
    memory.write_bytes(latency.read_bytes())  # the latency model under the memory model's name
    _fix_hash(memory)
    with pytest.raises(FittedModelError, match=r"training_mem_used_mib\.skops: the model inside says it was fitted for "
                                               r"stage training, target latency_ms"):
        load_model(tmp_path, stage="training", target="mem_used_mib")


@pytest.mark.parametrize("content", [b"", b"\x80\x04K\x01.", b"PK\x05\x06" + bytes(18)])
def test_a_model_file_that_is_not_skops_is_one_error(stored, tmp_path, content):
    _, path = stored
    path.write_bytes(content)
    _fix_hash(path)
    with pytest.raises(FittedModelError, match=r"training_latency_ms\.skops: not a (readable )?skops file"):
        load_model(tmp_path, stage="training", target="latency_ms")


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m.update(versions=[]), "versions: Input should be a valid dictionary"),
    (lambda m: m.update(feature_set="bogus"), "feature set 'bogus', method 'physical' is fitted on 'network'"),
    (lambda m: m.update(feature_probe="abc"), "feature_probe: Input should be a valid list"),
    (lambda m: m["fingerprint"].update(device=""), "fingerprint.device: String should have at least 1 character"),
    # what a prediction reads is the model's, in the skops object: no field of the header
    (lambda m: m.update(training_ranges={"batch_size": [1, 2]}), "training_ranges: Extra inputs are not permitted"),
    (lambda m: m.update(layer_groups={}), "layer_groups: Extra inputs are not permitted"),
    (lambda m: m.update(format="17"), "stored in format '17', this perf4sight reads format 29"),
    (lambda m: m.update(method="replay", feature_set="replay"),
     "the model inside says it was fitted for stage training, target latency_ms, method physical, feature_set network"),
])
def test_a_tampered_header_is_one_error_naming_the_field(stored, tmp_path, edit_header, change, message):
    edit_header(stored[1], change)
    with pytest.raises(FittedModelError, match=re.escape(message)):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_half_a_pair_is_an_error_and_no_pair_is_no_model(stored, tmp_path):
    from perf4sight.predict import Predictor

    _, path = stored
    assert Predictor.load(tmp_path).models.keys() == {"latency_ms"}  # no memory model: none stored, no error
    path.unlink()
    path.mkdir()  # a folder where the model was
    with pytest.raises(FittedModelError, match=r"training_latency_ms\.skops: not a file"):
        Predictor.load(tmp_path)
    path.rmdir()
    with pytest.raises(FittedModelError, match=r"training_latency_ms\.json: its model training_latency_ms\.skops is missing"):
        Predictor.load(tmp_path)


def _rewrite_model(path, change):
    """The stored object changed by `change`, dumped again and its hash fixed: a careful tamperer."""
    model = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    model = change(model) or model
    skops.io.dump(model, path)
    _fix_hash(path)


def _bound(**values):
    def change(model):
        model.bound_ = {"quantile": 0.95, "ratio": 1.2, "left_out": "network", "calibrated_ratio": None, **values}
    return change


def _residuals(residuals):
    def change(model):
        model.calibration_ = FamilyCalibration(residuals)
    return change


def _regressor(dataset):
    def change(model):
        model.regressor_ = PaperExtraTrees(n_estimators=2).fit(dataset.features, dataset.target)
    return change


def _stage(model):
    """The regressor's features computed for another stage than the model's."""
    model.regressor_[0].stage = "inference"


def _torch_version(model):
    """A model said to be fitted for another PyTorch than its features' step counts for."""
    model.torch_version = "1.8.0"


def _attribute(name, value):
    def change(model):
        setattr(model, name, value)
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_bound(ratio=float("nan")), "bound_.ratio: Input should be a finite number"),
    (_bound(ratio=-1.0), "bound_.ratio: Input should be greater than 0"),
    (_bound(quantile="high"), "bound_.quantile: Input should be a valid number"),
    (_residuals("abc"), "family_residuals: Input should be a valid dictionary"),
    (_residuals({"k": {"params": [1.0], "batch_size": [], "log_ratio": [0.0]}}),
     "params, batch_size and log_ratio are not lists of one equal, non-zero length"),
    (_residuals({"k": {"params": [1.0], "batch_size": [8.0], "log_ratio": [float("inf")]}}),
     "family_residuals.k.log_ratio.0: Input should be a finite number"),
    ("regressor", "holds PaperExtraTrees; method 'physical' is features: FeatureTransformer > terms: TermDesign > "
                  "solver: LatencySolver in a CalibratedModel"),
    (lambda model: model.regressor_, "the model inside says it was fitted for nothing (a Pipeline)"),
    (_stage, "its step 'features' has stage='inference', method 'physical' has stage='training'"),
    (_torch_version, "its step 'features' has torch_version=None, method 'physical' has torch_version='1.8.0'"),
    (_attribute("torch_version", 1.8), "torch_version 1.8 is not a PyTorch version"),
    (_attribute("training_ranges_", {"batch_size": (8.0, float("nan"))}),
     "training_ranges_.batch_size.1: Input should be a finite number"),
    (_attribute("layer_groups_", {"conv_1x1": -1}), "layer_groups_.conv_1x1: Input should be greater than or equal to 0"),
    (_attribute("recipes_", []), "recipes_: List should have at least 1 item"),
    (_attribute("train_nets_", "resnet18"), "train_nets_: Input should be a valid list"),
    (_attribute("method_choice_", {"chosen": "replay", "errors": "x", "left_out": "network", "reason": ""}),
     "method_choice_.errors: Input should be a valid dictionary"),
    (_attribute("feature_names_", ["bogus"]), "feature 'bogus' is not one of the 'network' features"),
])
def test_a_tampered_model_object_is_one_error_naming_what_is_wrong(dataset, stored, tmp_path, change, message):
    _, path = stored
    _rewrite_model(path, _regressor(dataset) if change == "regressor" else change)
    with pytest.raises(FittedModelError, match=re.escape(message)):
        load_model(tmp_path, stage="training", target="latency_ms")


def test_skops_trusts_the_model_types_and_the_methods_only():
    from perf4sight.fit import store

    assert set(store._MODEL_TYPES) == {"perf4sight.fit.calibration.CalibratedModel",
                                       "perf4sight.fit.calibration.FamilyCalibration",
                                       "perf4sight.device.recipe.Recipe"}
    assert not set(store._MODEL_TYPES) & set(trusted_types())


def test_a_fallback_is_stored_where_the_method_has_one_and_nowhere_else(dataset, fitted, tmp_path):
    """`physical` has no fallback: one stored with a fallback model inside is refused, as is
    `replay` stored without its `physical` one (a prediction under autocast would fail)."""
    with_fallback = CalibratedModel("physical", "latency_ms", fallback="streams").fit(dataset.rows, dataset.target)
    assert with_fallback.fallback_.method == "streams"
    save_models([with_fallback], storedir=tmp_path, fingerprint=H200_RUN)
    with pytest.raises(FittedModelError, match="holds a fallback model; method 'physical' has none"):
        load_model(tmp_path, stage="training", target="latency_ms")
    rows = dataset.rows.assign(architecture=[load_architecture(H200 / "models" / f"{model}.json", needs=Detail.LIFETIMES)
                                             for model in dataset.rows["model"]])
    replay = CalibratedModel("replay", "latency_ms").fit(rows, dataset.target)
    save_models([replay], storedir=tmp_path, fingerprint=H200_RUN)
    with pytest.raises(FittedModelError, match="its fallback is not a 'physical' model of the same device; fingerprint"):
        load_model(tmp_path, stage="training", target="latency_ms")
